// Package upgrade answers the question an operator asks before changing
// API servers: can the target API server read everything that is stored?
//
// kube-apiserver decodes an object from etcd only if it knows the version
// the object was written in. An upgrade, a downgrade, or removing a version
// from a CRD is safe for a resource only when every version its stored
// objects may be in is one the target decodes. No single record says which
// versions those are, so Check joins every record there is:
//
//   - svm's StorageStates: status.persistedStorageVersionHashes are the
//     storage versions objects may still be in, "Unknown" meaning any (the
//     automated migration design). Hashes are mapped back to versions by
//     computing discovery's hash of every version svm can see for the
//     resource, and of every version name Kubernetes could have used.
//   - discovery's storageVersionHash: the version written now, even when
//     svm's controller has not recorded it yet.
//   - a CRD's status.storedVersions, which the API server itself keeps, so
//     it holds even when svm was not running.
//   - the StorageVersion API (internal.apiserver.k8s.io/v1alpha1), where
//     each API server reports the version it encodes in. While they
//     disagree an upgrade is under way, objects are being written in more
//     than one version, and svm's view from discovery (one server's) cannot
//     be trusted; such a resource is unsafe until the servers agree.
//
// A resource is safe when every version that may be stored is one the
// target decodes, unsafe when one is not (or the servers disagree), and
// unknown when svm cannot tell what is stored. Only the resources the
// target names are judged: a resource whose decodable versions were not
// given cannot be judged, and is listed as not checked.
//
// The package is pure: it takes the objects as read and never talks to an
// API server, so every verdict is table-tested and the output is tested
// against golden files. `svm check-upgrade` (internal/cli) reads the
// objects and prints what this package decides.
package upgrade
