// Package node runs a Kubernetes node for svm's end-to-end tests: a
// kubelet with containerd, runc and the CNI bridge plugin (Debian's
// packages), kube-scheduler, and a kube-controller-manager running every
// controller, beside a test/controlplane API server, so that svm runs as
// the pod its chart makes.
//
// The node lives in the network and mount namespaces its test runs in,
// which hack/e2e creates (a kubelet refuses a loopback node IP, and svm's
// tests never use the machine's own interfaces): a veth pair inside gives
// the node its address, a bridge gives pods theirs, and a DNAT rule takes
// the kubernetes Service's address to the API server, as kube-proxy would.
// Mounts stay in the test's mount namespace. What a kubelet changes outside
// them (sysctls, cgroups, a few directories) hack/e2e puts back.
package node
