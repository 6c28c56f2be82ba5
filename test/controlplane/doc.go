// Package controlplane runs a real etcd and kube-apiserver on loopback, as
// separate processes built from Go modules (see the Makefile's controlplane
// target), and on request a kube-controller-manager running only
// Kubernetes' own storage version migrator and the garbage collector it
// depends on.
//
// svm's guarantees are about what the API server really does with
// resourceVersions, preconditions, conversion, encryption and the bytes it
// stores, so its tests run against the real thing rather than a fake client.
// Separate processes (rather than an in-process test server) are what make
// the chaos tests possible: each process can be stopped, killed with SIGKILL
// and started again on the same data, ports and credentials, so clients built
// before a restart keep working after it.
//
// kube-controller-manager is there to compare svm with the in-tree migrator
// on the same cluster, as a 1.37 cluster would have it. Tests ask for it
// (Options.ControllerManager) only when they need it: its garbage collector
// watches every object of every resource, CPU and memory that the other
// tests and the benchmarks would otherwise share two cores with.
//
// The same package backs `make controlplane-up`, which keeps a control plane
// in the foreground for the demo and for trying svm by hand.
package controlplane
