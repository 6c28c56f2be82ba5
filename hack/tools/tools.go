//go:build tools

// Package tools pins the versions of the control-plane binaries that svm's
// tests and demo run against: kube-apiserver, etcd, and the sample
// aggregated API server that stands in for aggregated APIs. It lives in its
// own module so that the replace directives Kubernetes needs never reach the
// main module: users can still `go install` svm's commands.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/sample-apiserver"
)
