# svm's build, test and demo entry points. Everything the targets need is
# built from Go modules into bin/ on first use; nothing is downloaded as a
# prebuilt binary.

SHELL := /usr/bin/env bash
BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

KUBE_VERSION := v1.37.2
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)

# The version matrix: the release of each supported minor that the matrix
# and upgrade tests run. KUBE_VERSION is built from hack/tools, the others
# from hack/kube/MINOR (written by hack/kube/new-module.sh). Each binary is
# cached in bin/ under its version, so a new patch release builds once.
KUBE_MATRIX := v1.34.4 v1.35.4 v1.36.3 $(KUBE_VERSION)
# The releases whose kube-controller-manager the tests run besides
# KUBE_VERSION's: those that serve the in-tree migration API as v1beta1.
KUBE_MATRIX_KCM := v1.35.4 v1.36.3

# kube_minor(v1.35.4) = 1.35
kube_minor = $(subst $(eval) ,.,$(wordlist 1,2,$(subst ., ,$(patsubst v%,%,$(1)))))

# Flags that make a locally built Kubernetes binary report its real version.
kube_ldflags = -X k8s.io/component-base/version.gitVersion=$(1) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(1))) \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/client-go/pkg/version.gitVersion=$(1) \
	-X k8s.io/client-go/pkg/version.gitMajor=1 \
	-X k8s.io/client-go/pkg/version.gitMinor=$(word 2,$(subst ., ,$(1)))
KUBE_LDFLAGS := $(call kube_ldflags,$(KUBE_VERSION))

TOOLS_MOD := hack/tools/go.mod hack/tools/go.sum
HELM_MOD := hack/helm/go.mod hack/helm/go.sum
# helm reports the release its module requires.
HELM_VERSION := $(shell awk '$$1 == "helm.sh/helm/v4" { print $$2 }' hack/helm/go.mod)
REF_MOD := hack/ref/go.mod hack/ref/go.sum
# The reference migrator reports (in its user agent) the release its module requires.
REF_VERSION := $(shell awk '$$1 == "sigs.k8s.io/kube-storage-version-migrator" { print $$2 }' hack/ref/go.mod)

# Three packages at a time, and up to four of a package's tests side by
# side: an integration test spends much of its time waiting (on its API
# server, on kube-controller-manager, on a rate it set itself), and with two
# packages at a time two cores were busy only 80% of a run.
GO_TEST_FLAGS ?= -p 3 -parallel 4 -count=1 -timeout 30m
# The longest suites are named first, so that they start first: go test runs
# packages in the order given, and a long one started last would run alone
# at the end while the other slots stand idle. chaos spends the CPU and
# intree mostly waits on kube-controller-manager, so the two pair well.
SLOW_TESTS := ./test/integration/chaos ./test/integration/intree ./test/integration/kubeupgrade \
	./test/integration/controller ./test/integration/faults ./test/integration/badinput

.PHONY: all
all: build

##@ Build

.PHONY: build
build: ## Build the svm binary into bin/.
	go build -o $(BIN)/svm ./cmd/svm

# What `make image` stamps into svm and labels the image with. Outside a git
# checkout the version is dev and the commit is left out (svm version then
# says unknown); the image's time is the commit's, so that building a commit
# again gives the same image.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

.PHONY: image
image: ## Build the container image without a Docker daemon into _output/svm-image.tar (docker load -i, podman load -i or crane push read it); VERSION=, COMMIT= override git's; ARGS="--arch arm64 --oci-layout DIR".
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) go run ./hack/image --version '$(VERSION)' --commit '$(COMMIT)' --output _output/svm-image.tar $(ARGS)

.PHONY: controlplane
controlplane: $(BIN)/kube-apiserver $(BIN)/etcd $(BIN)/kube-controller-manager $(BIN)/sample-apiserver ## Build kube-apiserver, etcd, kube-controller-manager and the sample aggregated API server into bin/ (skipped when up to date).

$(BIN)/kube-apiserver: $(TOOLS_MOD)
	@echo "building kube-apiserver $(KUBE_VERSION) (the first build takes about 7 minutes on 2 cores)"
	cd hack/tools && go build -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-apiserver

# kube-controller-manager runs Kubernetes' own storage version migrator
# (and the garbage collector it reads objects from), so that svm can be
# compared with it on the same cluster.
$(BIN)/kube-controller-manager: $(TOOLS_MOD)
	@echo "building kube-controller-manager $(KUBE_VERSION) (a few minutes after kube-apiserver, longer on a cold cache)"
	cd hack/tools && go build -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-controller-manager

# The matrix's binaries. KUBE_VERSION's are the ones above, linked under
# their versioned names; every other release's come from its hack/kube
# module.
.PHONY: matrix
matrix: $(foreach v,$(KUBE_MATRIX),$(BIN)/kube-apiserver-$(v)) $(foreach v,$(KUBE_MATRIX_KCM),$(BIN)/kube-controller-manager-$(v)) ## Build kube-apiserver of every release in the version matrix, and the kube-controller-manager of those KUBE_MATRIX_KCM names, into bin/ (4 to 7 minutes each the first time).

.PHONY: matrix-kcm
matrix-kcm: $(foreach v,$(KUBE_MATRIX),$(BIN)/kube-controller-manager-$(v)) ## Build kube-controller-manager of every release in the version matrix into bin/.

$(BIN)/kube-apiserver-$(KUBE_VERSION): $(BIN)/kube-apiserver
	ln -f $< $@
$(BIN)/kube-controller-manager-$(KUBE_VERSION): $(BIN)/kube-controller-manager
	ln -f $< $@

define kube_release
$(BIN)/kube-apiserver-$(1): hack/kube/$(call kube_minor,$(1))/go.mod hack/kube/$(call kube_minor,$(1))/go.sum
	@echo "building kube-apiserver $(1) (about 7 minutes on 2 cores the first time)"
	cd hack/kube/$(call kube_minor,$(1)) && go build -ldflags "$(call kube_ldflags,$(1))" -o $$@ k8s.io/kubernetes/cmd/kube-apiserver
$(BIN)/kube-controller-manager-$(1): hack/kube/$(call kube_minor,$(1))/go.mod hack/kube/$(call kube_minor,$(1))/go.sum
	@echo "building kube-controller-manager $(1)"
	cd hack/kube/$(call kube_minor,$(1)) && go build -ldflags "$(call kube_ldflags,$(1))" -o $$@ k8s.io/kubernetes/cmd/kube-controller-manager
endef
$(foreach v,$(filter-out $(KUBE_VERSION),$(KUBE_MATRIX)),$(eval $(call kube_release,$(v))))

# An aggregated API server (k8s.io/sample-apiserver), so that svm is tested
# on aggregated resources too.
$(BIN)/sample-apiserver: $(TOOLS_MOD)
	cd hack/tools && go build -o $@ k8s.io/sample-apiserver

# A node for make e2e: the kubelet and kube-scheduler of KUBE_VERSION.
.PHONY: node
node: $(BIN)/kubelet $(BIN)/kube-scheduler ## Build the kubelet and kube-scheduler into bin/ (make e2e's node).

$(BIN)/kubelet: $(TOOLS_MOD)
	cd hack/tools && go build -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubelet
$(BIN)/kube-scheduler: $(TOOLS_MOD)
	cd hack/tools && go build -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-scheduler

.PHONY: e2e
e2e: controlplane node kubectl helm ## As root: svm's chart and image on a real node (kubelet, containerd; Debian's packages installed where missing), in namespaces of its own; the machine is checked to be left as found.
	mkdir -p _output/e2e
	go test -c -tags e2e -o _output/e2e/e2e.test ./test/e2e
	go run ./hack/image --version e2e --tag svm:e2e --output _output/e2e/svm-image.tar
	SVM_BIN_DIR=$(BIN) go run ./hack/e2e --test-binary _output/e2e/e2e.test --svm-image _output/e2e/svm-image.tar --artifacts $(CURDIR)/_output/e2e/logs $(ARGS)

.PHONY: kubectl
kubectl: $(BIN)/kubectl ## Build kubectl into bin/ (tests run svm as a kubectl plugin and apply its manifests).

$(BIN)/kubectl: $(TOOLS_MOD)
	cd hack/tools && go build -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubectl

.PHONY: helm
helm: $(BIN)/helm ## Build helm into bin/ (tests render charts/svm with it and install it on a real API server).

# helm comes from a module of its own, hack/helm, so that the Kubernetes
# libraries it is released with stay out of svm's module and hack/tools'.
$(BIN)/helm: $(HELM_MOD)
	@echo "building helm $(HELM_VERSION) (the first build takes about 7 minutes on 2 cores, plus module downloads)"
	cd hack/helm && go build -ldflags "-X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)" -o $@ helm.sh/helm/v4/cmd/helm

.PHONY: ref-migrator
ref-migrator: $(BIN)/ref-migrator ## Build the reference migrator (sigs.k8s.io/kube-storage-version-migrator) at its last release into bin/, for make bench's comparison.

# The reference migrator comes from a module of its own, hack/ref, which
# requires its last release as shipped (Kubernetes libraries v0.21).
$(BIN)/ref-migrator: $(REF_MOD)
	@echo "building the reference migrator $(REF_VERSION) (about a minute on 2 cores, plus module downloads)"
	cd hack/ref && go build -ldflags "-X sigs.k8s.io/kube-storage-version-migrator/pkg/version.VERSION=$(REF_VERSION)" -o $@ sigs.k8s.io/kube-storage-version-migrator/cmd/migrator

$(BIN)/etcd: $(TOOLS_MOD) hack/tools/etcd/main.go
	@echo "building etcd"
	cd hack/tools && go build -o $@ ./etcd

$(CONTROLLER_GEN):
	GOBIN=$(BIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(BIN)/controller-gen $@

##@ Generate

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy, CRDs and RBAC from markers, and the chart's copies of them.
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd:crdVersions=v1 paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=svm-controller paths=./internal/... output:rbac:artifacts:config=config/rbac
	@# The chart installs the same CRDs and controller RBAC as config/default.
	rm -f charts/svm/crds/*.yaml
	cp config/crd/bases/*.yaml charts/svm/crds/
	cp config/rbac/role.yaml charts/svm/files/role.yaml

.PHONY: verify-generated
verify-generated: ## Fail when regenerating changes any generated file.
	@before=$$(find api config charts -type f -print0 | sort -z | xargs -0 sha256sum); \
	$(MAKE) --no-print-directory generate >/dev/null || exit 1; \
	after=$$(find api config charts -type f -print0 | sort -z | xargs -0 sha256sum); \
	if [ "$$before" != "$$after" ]; then \
		echo "generated files were stale and have been regenerated:"; \
		diff <(echo "$$before") <(echo "$$after") | grep '^>' ; exit 1; fi

##@ Check and test

.PHONY: fmt-check
fmt-check: ## Fail when gofmt would change a file.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

.PHONY: vet
vet: ## go vet svm's module, the tools module's etcd and the consumer module that imports svm's public API.
	go vet ./...
	cd hack/tools && go vet ./etcd
	cd test/consumer && go vet ./...

.PHONY: test
test: controlplane matrix kubectl helm verify-generated fmt-check vet test-race ## Build the control plane, kubectl and helm, check generated code, and run every test, make e2e's on a real node last (as root).
	@# internal/ and pkg/ ran in test-race already: the rest runs here.
	SVM_BIN_DIR=$(BIN) go test $(GO_TEST_FLAGS) $(SLOW_TESTS) ./api/... ./cmd/... ./hack/... ./test/...
	$(MAKE) e2e

.PHONY: test-short
test-short: controlplane kubectl helm ## For inner loops: vet, the unit tests and one smoke test on a real control plane (a few minutes warm). make test (and CI) runs everything.
	go vet ./...
	go test -count=1 ./internal/... ./test/docs/
	SVM_BIN_DIR=$(BIN) go test -count=1 -run '^TestMigrateSaysWhatEtcdSaw$$' ./test/integration/cli/

.PHONY: test-census
test-census: ## Count the integration tests, their subtests and their checks (a change to the suites must not drop any).
	@hack/test-census.sh

.PHONY: test-race
test-race: ## Run the unit tests (and the fuzz tests' seed corpora) with the race detector.
	go test -race -count=1 ./internal/... ./pkg/...

##@ Try it

.PHONY: controlplane-up
controlplane-up: controlplane ## Run a local control plane in the foreground; DIR=path for its kubeconfig; RELEASE=1.34 runs another supported minor (make matrix; add ARGS=--controller-manager=false where its kube-controller-manager is not built).
	go build -o $(BIN)/svm-controlplane ./hack/controlplane
	exec $(BIN)/svm-controlplane --bin-dir $(BIN) --dir $(or $(DIR),_output/controlplane) $(if $(RELEASE),--release $(RELEASE)) $(ARGS)

.PHONY: demo
demo: controlplane build ## Run the end-to-end demo on a local control plane; ARGS="--objects N --qps Q" to change it.
	go build -o $(BIN)/svm-demo ./hack/demo
	mkdir -p _output
	$(BIN)/svm-demo --bin-dir $(BIN) --log-dir $(CURDIR)/_output $(ARGS)

.PHONY: demo-kms
demo-kms: controlplane build ## Run the KMS v2 key rotation demo: Secrets under a KMS v2 plugin's key, the key rotated, svm re-encrypting them.
	go build -o $(BIN)/svm-demo ./hack/demo
	mkdir -p _output
	$(BIN)/svm-demo --kms --bin-dir $(BIN) --log-dir $(CURDIR)/_output $(ARGS)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Benchmarks

BENCH ?= BenchmarkSuite
# -v: benchmark logs (one line per pass) are cut after ten lines otherwise.
BENCH_FLAGS ?= -benchtime 1x -v
.PHONY: bench
bench: controlplane $(BIN)/ref-migrator ## Run the benchmark suite on a local control plane (not part of make test); table in _output/benchmarks.md, log in _output/bench.txt.
	mkdir -p _output
	SVM_BIN_DIR=$(BIN) SVM_BENCH_RESULTS=$(CURDIR)/_output/benchmarks.md go test -run '^$$' -bench '$(BENCH)' $(BENCH_FLAGS) -timeout 150m ./test/bench | tee _output/bench.txt
