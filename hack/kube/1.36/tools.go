//go:build tools

// Package tools pins Kubernetes v1.36.3, whose kube-apiserver and
// kube-controller-manager svm's version matrix runs against. Written by
// hack/kube/new-module.sh; its own module keeps the replace directives
// Kubernetes needs out of every other module.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
