# The svm container image: one static binary, nothing else (no shell, no
# package manager), running as a non-root user.
#
#   docker build -t svm:dev --build-arg VERSION=$(git describe --tags --always) .
#
# svm needs no files from the image: it reads the API server's address, CA
# and token from the pod's service account mount. It runs as UID 65532,
# which the restricted Pod Security Standard of config/manager's namespace
# requires.
FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/svm-project/svm/internal/cli.Version=${VERSION}" \
    -o /out/svm ./cmd/svm

FROM scratch
COPY --from=build /out/svm /svm
USER 65532:65532
ENTRYPOINT ["/svm"]
