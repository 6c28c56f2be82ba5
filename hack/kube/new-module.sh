#!/usr/bin/env bash
# Writes hack/kube/MINOR/go.mod (and go.sum) for one Kubernetes release, so
# that `make` can build that release's kube-apiserver and
# kube-controller-manager for the version matrix. Run it when a patch release
# is to be followed:
#
#   hack/kube/new-module.sh v1.35.4
#
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
# with directories of its own repository; a module that builds it has to
# replace every one of them with the published k8s.io/NAME v0.MINOR.PATCH.
# The list is read from the release's own go.mod, so it is always that
# release's.
set -euo pipefail

version=${1:?usage: $0 vMAJOR.MINOR.PATCH}
version=v${version#v}
minor=$(cut -d. -f1,2 <<<"${version#v}")
staging=v0.${version#v1.}
dir=$(cd "$(dirname "$0")" && pwd)/$minor

gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -n "$gomod" ] || { echo "k8s.io/kubernetes@$version could not be downloaded" >&2; exit 1; }

mkdir -p "$dir"
rm -f "$dir/go.mod" "$dir/go.sum"
cat >"$dir/tools.go" <<GO
//go:build tools

// Package tools pins Kubernetes $version, whose kube-apiserver and
// kube-controller-manager svm's version matrix runs against. Written by
// hack/kube/new-module.sh; its own module keeps the replace directives
// Kubernetes needs out of every other module.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
GO
cd "$dir"
go mod init "github.com/svm-project/svm/hack/kube/$minor" >/dev/null 2>&1
go mod edit -go=1.26.0
for m in $(awk '$1 == "k8s.io/kubernetes" { next } /=> \.\/staging\/src\// { print $1 }' "$gomod"); do
	go mod edit -replace="$m=$m@$staging"
done
go mod edit -require="k8s.io/kubernetes@$version"
go mod tidy >/dev/null
# tidy may write the apiextensions-apiserver requirement as v0.0.0.
go mod edit -require="k8s.io/apiextensions-apiserver@$staging"
go mod tidy >/dev/null
echo "wrote $dir/go.mod for Kubernetes $version"
