// Package apiservers finds a cluster's API servers and reads what each
// reports about the encryption-at-rest configuration it has loaded.
//
// A key rotation is safe to act on only once every API server writes with
// the new key: an object rewritten while one server still writes with the
// old key may be written again, by that server, under it. The API offers
// no cluster-wide view of this. Each kube-apiserver publishes its own
// identity (a Lease in kube-system labelled apiserver.kubernetes.io/identity)
// and, on its own /metrics, the hash of the encryption configuration file
// it has loaded (apiserver_encryption_config_controller_last_config_info)
// and when it last reloaded it. A KMS v2 key rotation changes no
// configuration: for it, each server's envelope encryption gauges tell,
// per KMS v2 provider, the key its plugin last answered and the keys it
// wrote under, and its kms-providers readiness check whether that answer
// took effect. This package reads them all; what to conclude from them is
// package rotation's.
package apiservers
