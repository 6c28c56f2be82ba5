package intree

import (
	"context"
	"errors"
	"fmt"
	"slices"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	storagemigrationv1beta1 "k8s.io/api/storagemigration/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// CreatedByLabel marks the in-tree migrations svm created, with the
	// same key as svm's own migrations carry.
	CreatedByLabel = "migration.k8s.io/created-by"
	// CreatedByExecutor is CreatedByLabel's value on an in-tree migration
	// svm controller created to execute one of svm's migrations.
	CreatedByExecutor = "svm-migration-controller"
	// CreatedByProbe is CreatedByLabel's value on a probe migration.
	CreatedByProbe = "svm-executor-probe"
	// ForMigrationAnnotation holds the uid of the svm migration an in-tree
	// migration executes, so that svm adopts only its own after a restart
	// and never waits for itself.
	ForMigrationAnnotation = "migration.k8s.io/svm-migration-uid"
)

// GroupVersion is the in-tree migrator's API, the one svm hands migrations
// over to (Kubernetes 1.37 and later).
var GroupVersion = storagemigrationv1.SchemeGroupVersion

// BetaGroupVersion is the in-tree migrator's API in Kubernetes 1.35 and
// 1.36, off by default there. svm does not hand migrations over to it, but
// never rewrites a resource while one of its migrations is Running.
var BetaGroupVersion = storagemigrationv1beta1.SchemeGroupVersion

// ServedBeta reports whether the server serves BetaGroupVersion's
// migrations with list and watch, and not GroupVersion's: whether svm must
// read them to keep out of their way.
func ServedBeta(disc discovery.DiscoveryInterface) (bool, error) {
	if v1, err := Served(disc); err != nil || v1 {
		return false, err
	}
	return servedWith(disc, BetaGroupVersion, "list", "watch")
}

// List reads the in-tree migrations: v1's when v1 is set, v1beta1's (as
// v1 ones, see FromBeta) when beta is. A version the server does not
// serve adds none. opts are handed to r's List calls.
func List(ctx context.Context, r client.Reader, v1, beta bool, opts ...client.ListOption) ([]storagemigrationv1.StorageVersionMigration, error) {
	var out []storagemigrationv1.StorageVersionMigration
	if v1 {
		var list storagemigrationv1.StorageVersionMigrationList
		if err := r.List(ctx, &list, opts...); err != nil && !notServed(err) {
			return nil, fmt.Errorf("list in-tree migrations: %w", err)
		}
		out = list.Items
	}
	if beta {
		var list storagemigrationv1beta1.StorageVersionMigrationList
		if err := r.List(ctx, &list, opts...); err != nil && !notServed(err) {
			return nil, fmt.Errorf("list in-tree %s migrations: %w", BetaGroupVersion, err)
		}
		for i := range list.Items {
			out = append(out, FromBeta(&list.Items[i]))
		}
	}
	return out, nil
}

func notServed(err error) bool { return meta.IsNoMatchError(err) || apierrors.IsNotFound(err) }

// FromBeta is a v1beta1 in-tree migration as a v1 one: the two versions'
// spec and status are the same.
func FromBeta(m *storagemigrationv1beta1.StorageVersionMigration) storagemigrationv1.StorageVersionMigration {
	out := storagemigrationv1.StorageVersionMigration{ObjectMeta: *m.ObjectMeta.DeepCopy()}
	out.Spec.Resource = m.Spec.Resource
	out.Status.ResourceVersion = m.Status.ResourceVersion
	out.Status.Conditions = append(out.Status.Conditions, m.Status.Conditions...)
	return out
}

// Served reports whether the server serves the in-tree
// StorageVersionMigration API with the verbs svm needs to hand a migration
// over (create, and list and watch to follow it).
func Served(disc discovery.DiscoveryInterface) (bool, error) {
	return servedWith(disc, GroupVersion, "create", "list", "watch")
}

// servedWith reports whether gv's storageversionmigrations are served with
// verbs.
func servedWith(disc discovery.DiscoveryInterface, gv schema.GroupVersion, verbs ...string) (bool, error) {
	list, err := disc.ServerResourcesForGroupVersion(gv.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", gv, err)
	}
	for _, r := range list.APIResources {
		if r.Name == "storageversionmigrations" {
			return hasVerbs(r.Verbs, verbs...), nil
		}
	}
	return false, nil
}

func hasVerbs(have metav1.Verbs, want ...string) bool {
	for _, v := range want {
		if !slices.Contains(have, v) {
			return false
		}
	}
	return true
}

// IsRunning reports whether kube-controller-manager's runner holds m's
// resource: it sets Running before any object is written and clears it
// only after its clean-up (the CRD's StorageMigrating condition and
// storedVersions), so while it is True nobody else may migrate the
// resource.
func IsRunning(m *storagemigrationv1.StorageVersionMigration) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, string(storagemigrationv1.MigrationRunning))
}

// Succeeded reports whether m succeeded.
func Succeeded(m *storagemigrationv1.StorageVersionMigration) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, string(storagemigrationv1.MigrationSucceeded))
}

// Failed reports whether m failed.
func Failed(m *storagemigrationv1.StorageVersionMigration) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, string(storagemigrationv1.MigrationFailed))
}

// Ended reports whether m succeeded or failed and kube-controller-manager
// has finished its clean-up, pruning a CRD's storedVersions included.
func Ended(m *storagemigrationv1.StorageVersionMigration) bool {
	return (Succeeded(m) || Failed(m)) && !IsRunning(m)
}

// Message is the text of m's deciding condition: Failed, Succeeded or
// Running, in that order; "" when it has none.
func Message(m *storagemigrationv1.StorageVersionMigration) string {
	for _, t := range []storagemigrationv1.MigrationConditionType{storagemigrationv1.MigrationFailed, storagemigrationv1.MigrationSucceeded, storagemigrationv1.MigrationRunning} {
		if c := meta.FindStatusCondition(m.Status.Conditions, string(t)); c != nil && c.Status == metav1.ConditionTrue {
			return c.Message
		}
	}
	return ""
}

// groupResource is the resource m migrates.
func groupResource(m *storagemigrationv1.StorageVersionMigration) schema.GroupResource {
	return schema.GroupResource{Group: m.Spec.Resource.Group, Resource: m.Spec.Resource.Resource}
}

// Holder returns the in-tree migration that holds gr, Running and not the
// one executing the svm migration with uid self; nil when none does.
func Holder(ms []storagemigrationv1.StorageVersionMigration, gr schema.GroupResource, self string) *storagemigrationv1.StorageVersionMigration {
	for i := range ms {
		m := &ms[i]
		if groupResource(m) == gr && IsRunning(m) && (self == "" || m.Annotations[ForMigrationAnnotation] != self) {
			return m
		}
	}
	return nil
}

// gcIgnored are the resources kube-controller-manager's garbage collector
// never watches (its ignoredResources), so its migrator cannot migrate
// them: their in-tree migrations stay Running for ever.
var gcIgnored = map[schema.GroupResource]bool{
	{Resource: "events"}:                         true,
	{Group: "events.k8s.io", Resource: "events"}: true,
}

// CanExecute reports whether kube-controller-manager's migrator can migrate
// the resource gr, whose discovery lists verbs: it reads objects only from
// its garbage collector's caches, which hold the resources that can be
// deleted, listed and watched, less the ones the collector ignores.
func CanExecute(gr schema.GroupResource, verbs []string) bool {
	return !gcIgnored[gr] && hasVerbs(verbs, "delete", "list", "watch")
}

// RunnerWorkers is how many in-tree migrations kube-controller-manager's
// storage version migrator runs at once (its controller's workers), so
// how many svm hands over at once.
const RunnerWorkers = 5

// Executor names who rewrites the objects of svm's migrations.
type Executor string

const (
	// ExecutorAuto chooses at start: InTree if the API is served and a
	// probe shows kube-controller-manager acting on it, SVM otherwise.
	ExecutorAuto Executor = "auto"
	// ExecutorSVM is svm's own engine.
	ExecutorSVM Executor = "svm"
	// ExecutorInTree is kube-controller-manager's in-tree migrator.
	ExecutorInTree Executor = "in-tree"
)

// ParseExecutor checks the value of --executor.
func ParseExecutor(s string) (Executor, error) {
	switch e := Executor(s); e {
	case ExecutorAuto, ExecutorSVM, ExecutorInTree:
		return e, nil
	}
	return "", fmt.Errorf("--executor must be auto, svm or in-tree, got %q", s)
}

// Verdict is what a probe found.
type Verdict struct {
	// Acts is true when kube-controller-manager ran the probe migration to
	// its end.
	Acts bool
	// Reason says why not, or what it took.
	Reason string
}

// Choose decides who executes: asked is --executor; served whether the
// API is served; probe what the probe found (nil when none ran). It
// returns the executor and a sentence that says why, for the log.
func Choose(asked Executor, served bool, probe *Verdict) (Executor, string, error) {
	switch asked {
	case ExecutorSVM:
		return ExecutorSVM, "--executor=svm", nil
	case ExecutorInTree:
		if !served {
			return "", "", errors.New("--executor=in-tree, but the server does not serve " + GroupVersion.String() + " storageversionmigrations with create, list and watch")
		}
		return ExecutorInTree, "--executor=in-tree", nil
	}
	switch {
	case !served:
		return ExecutorSVM, "the server does not serve " + GroupVersion.String() + " storageversionmigrations", nil
	case probe == nil:
		return "", "", errors.New("the in-tree API is served: a probe must decide")
	case !probe.Acts:
		return ExecutorSVM, "the in-tree API is served but kube-controller-manager did not run a probe migration: " + probe.Reason, nil
	}
	return ExecutorInTree, "kube-controller-manager ran a probe migration: " + probe.Reason, nil
}
