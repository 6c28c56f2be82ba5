// Package framework is what svm's integration tests stand on, and the one
// place for what more than one suite needs: a real control plane with
// ready clients, custom resources whose storage version can be flipped,
// the raw values in etcd, svm run as a process, and waiting for what it
// does. Every check of a migration's outcome goes through the bytes etcd
// holds, not through what the API server chooses to serve.
//
// By file:
//   - env.go, shared.go: a control plane of a test's own (Start), or one
//     that a package's tests share (Main, Shared), each on a resource of
//     its own (NewResource, TestName).
//   - crd.go, objects.go, snapshot.go: CRDs with two versions, storage
//     flips, objects by the thousand (SeedWidgets writes through etcd),
//     and snapshots of their contents (ExpectUnchanged).
//   - etcd.go: raw values, their versions and revisions (ExpectStored).
//   - svm.go, cli.go, kubectl.go, goroutines.go: svm and kubectl as
//     processes, and where svm waited when a test failed.
//   - migrations.go: creating migrations and waiting for their
//     conditions, StorageStates and anything else (Eventually).
//   - engine.go: svm's engine in the test process.
//   - proxy.go, faultproxy.go, requests.go: what reached the API server,
//     by the client's count, a proxy's or the server's own; injected
//     faults.
//   - route.go, etcdproxy.go: a client's reads and writes split over two
//     API servers (Split), and a server whose etcd connections for one
//     resource are held while the others flow (EtcdProxy).
//   - webhook.go, conversion.go: admission and conversion webhooks served
//     by the test.
//   - observe.go: metrics, health endpoints and events.
//   - aggregated.go, upgrade.go, encryption.go: an aggregated API server,
//     the StorageVersion API, encryption at rest.
//   - kms.go: a control plane that encrypts Secrets with KMS v2 through
//     the test plugin (test/kmsplugin), and the key IDs values are sealed
//     under, read from etcd.
//   - security.go, security_leaks.go: RBAC, service accounts, audit logs,
//     and finding object contents where they must not be.
//   - chaos.go, summary.go: seeded randomness and scenario reports.
package framework
