//go:build tools

// Package tools pins the versions of the control-plane binaries that svm's
// tests and demo run against: kube-apiserver, etcd, kube-controller-manager
// (for the in-tree storage version migrator, which svm is compared with),
// the sample aggregated API server that stands in for aggregated APIs, and
// kubectl (to run svm as a kubectl plugin and to render and apply its
// manifests). It lives in its own module so that the replace directives
// Kubernetes needs never reach the main module: users can still
// `go install` svm's commands.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/sample-apiserver"
)
