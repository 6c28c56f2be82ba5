// Package intree is what svm knows of Kubernetes' in-tree storage version
// migrator: the storagemigration.k8s.io/v1 StorageVersionMigration API that
// kube-apiserver serves since v1.37, executed by kube-controller-manager's
// storage-version-migrator-controller.
//
// svm works with it rather than beside it. The in-tree migrator executes
// migrations but has no trigger: nothing creates them. svm's trigger does,
// and svm controller can hand the rewriting of a migration to
// kube-controller-manager instead of its own engine. Whichever executes, the
// other must not collide with it: svm never runs its engine on a resource
// while an in-tree migration of that resource is Running (the in-tree runner
// allows one per resource and marks it Running before it writes anything).
//
// Serving the API is not enough to hand work over: kube-controller-manager's
// controller may be turned off (--controllers), or the garbage collector it
// reads objects from may be off, and then in-tree migrations stay pending
// forever. So the automatic choice (Choose) takes the in-tree executor only
// after a probe migration (Probe) has shown kube-controller-manager running
// one to its end.
package intree
