// Package framework is what svm's integration tests stand on: a real control
// plane with ready clients, a two-version custom resource whose storage
// version can be flipped, discovery's storage version hashes, and the raw
// values in etcd. Every check of a migration's outcome goes through the
// bytes etcd holds, not through what the API server chooses to serve.
package framework
