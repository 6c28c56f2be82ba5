// Package conversion_test counts the calls a migration costs a custom
// resource's conversion webhook, against a real API server.
package conversion_test

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"

	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

const objects = 1000

// TestConversionWebhookCalls migrates 1,000 custom resources whose CRD
// converts through a webhook, and counts the webhook's calls.
//
// When the preferred version, which svm's CLI and trigger pick, is not the
// storage version, a migration in the preferred version makes the API
// server convert every object to and from it; one in the version
// inStorageVersion picks does not. The objects here were
// written in v1, stored in v2, and v1 became the storage version again
// while v2 stays preferred.
//
// When the preferred version is the storage version, as after the usual
// storage flip from v1 to v2, what remains is the API server's own work,
// which no request of svm's can avoid (see docs/design.md, Conversion
// webhooks).
//
// The two cases run side by side, each on a control plane of its own, so
// that neither API server also serves the other case's requests while its
// webhook calls are counted.
func TestConversionWebhookCalls(t *testing.T) {
	t.Parallel()
	t.Run("preferred version is not the storage version", func(t *testing.T) {
		t.Parallel()
		env, m, disc := start(t)
		// Two resources in the same state: one migrated as svm's callers
		// choose today, one in its storage version.
		preferred := framework.Resource{Group: "example.com", Plural: "gadgets", Kind: "Gadget"}
		storage := framework.Resource{Group: "example.com", Plural: "gizmos", Kind: "Gizmo"}
		hooks := map[string]*framework.ConversionWebhook{}
		for _, r := range []framework.Resource{preferred, storage} {
			hooks[r.Plural] = prepare(t, env, r, "v2", "v1")
		}
		lists := servedLists(t, disc)

		inPreferred := discovered(t, disc, preferred)
		if got := inStorageVersion(lists, inPreferred).Version; inPreferred.Version != "v2" || got != "v1" {
			t.Fatalf("discovery resolves %s to %s, stored in %s: want v2, stored in v1", inPreferred.GroupResource(), inPreferred.Version, got)
		}
		before := migrate(t, m, hooks[preferred.Plural], inPreferred.GroupVersionResource)

		inStorage := inStorageVersion(lists, discovered(t, disc, storage))
		after := migrate(t, m, hooks[storage.Plural], inStorage.GroupVersionResource)

		t.Logf("migration in the preferred version %s: %s (%.2f calls per object)", inPreferred.Version, before, perObject(before))
		t.Logf("migration in the storage version %s:   %s (%.2f calls per object)", inStorage.Version, after, perObject(after))
		for _, r := range []framework.Resource{preferred, storage} {
			env.ExpectStored(t, r.EtcdPrefix(), map[string]int{"example.com/v1": objects})
		}
		// In the storage version, a re-stored object costs two calls: the
		// API server decodes its old bytes (v2→v1), and the v2 watch
		// cache decodes the new ones. In v2 it costs eleven: the field
		// manager converts the object to v1 for its v1 managers (three
		// calls an attempt, two attempts), the API server encodes it to
		// the storage version three times and decodes its answer back
		// once, and the v2 watch cache decodes the new bytes.
		if got := perObject(after); got > 2+slack {
			t.Errorf("migration in the storage version: %.2f webhook calls per object, want at most %.2f", got, 2+slack)
		}
		if got := perObject(before); got <= 2+slack {
			t.Errorf("migration in the preferred version: %.2f webhook calls per object, want more than %.2f, or this test shows nothing", got, 2+slack)
		}
	})

	t.Run("preferred version is the storage version", func(t *testing.T) {
		t.Parallel()
		env, m, disc := start(t)
		// The usual case: written and stored in v1, then v2 is stored.
		r := framework.Resource{Group: "example.com", Plural: "widgets", Kind: "Widget"}
		hook := prepare(t, env, r, "v1", "v2")
		target := discovered(t, disc, r)
		if stored := inStorageVersion(servedLists(t, disc), target); stored != target || target.Version != "v2" {
			t.Fatalf("discovery resolves %s to %s, stored in %s: want v2 for both", r.Plural, target.Version, stored.Version)
		}
		first := migrate(t, m, hook, target.GroupVersionResource)
		env.ExpectStored(t, r.EtcdPrefix(), map[string]int{"example.com/v2": objects})
		second := migrate(t, m, hook, target.GroupVersionResource)
		t.Logf("first migration:  %s (%.2f calls per object)", first, perObject(first))
		t.Logf("second migration: %s (%.2f calls per object)", second, perObject(second))

		// All of it is the API server's, and svm adds nothing: the list,
		// on a warm cache, costs no call. Per re-stored object: decoding
		// its old bytes (v1→v2); and v2→v1 for the field manager (the
		// objects' managers wrote v1: three calls an attempt, two
		// attempts) and for the v1 watch cache.
		if got := perObject(first); got > 8+slack || first.Objects[v1ToV2] > objects {
			t.Errorf("first migration: %.2f webhook calls per object (%v), want at most %.2f, of them at most one v1→v2", got, first.Objects, 8+slack)
		}
		// Nothing is stored again, and nothing needs a second attempt:
		// the field manager's three calls remain.
		if got := perObject(second); got > 3+slack {
			t.Errorf("second migration: %.2f webhook calls per object (%v), want at most %.2f", got, second.Objects, 3+slack)
		}
	})
}

// start starts a control plane for one case, and returns it, svm's engine
// on it, and a discovery client as svm's trigger uses.
func start(t *testing.T) (*framework.Env, *migrator.Migrator, *discovery.DiscoveryClient) {
	t.Helper()
	env := framework.Start(t, controlplane.Options{})
	clients, err := kubeclients.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	disc := clients.Discovery
	m, _ := framework.NewMigrator(t, env.Config, migrator.Options{})
	return env, m, disc
}

// slack is what a few writes retried by svm or the API server may add, per
// object: the counts are exact when nothing is retried.
const slack = 0.05

var v1ToV2 = framework.Direction{From: "example.com/v1", To: "example.com/v2"}

// prepare creates r's CRD, 1,000 objects written in v1 while created is
// the storage version, a conversion webhook, and then makes stored the
// storage version. It returns once the API server has built its caches
// for the new storage (which costs a conversion per object and cache whose
// version the object is not stored in) and the webhook is quiet.
func prepare(t *testing.T, env *framework.Env, r framework.Resource, created, stored string) *framework.ConversionWebhook {
	t.Helper()
	env.CreateResource(t, r)
	env.SetStorage(t, r, created)
	env.CreateObjects(t, r, []string{"ns-a", "ns-b", "ns-c", "ns-d"}, objects)
	hook := env.StartConversionWebhook(t, r)
	flipped := hook.Conversions()
	env.SetStorage(t, r, stored)
	// The first request after a CRD changes builds its storage: a watch
	// cache per served version, each filled from etcd, which converts each
	// object once. A list on a cache not ready yet is served from etcd
	// instead, converting each object of the chunk; a cluster's own
	// watchers of the resource rebuild the caches at once, before any
	// migration. Discovery shows the new storage version before the API
	// server has swapped in the new storage, so a list may still reach the
	// old one: list until the webhook has converted every object, then let
	// the build finish.
	var lastErr error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, lastErr = env.Dynamic.Resource(r.GVR(stored)).List(ctx, metav1.ListOptions{Limit: 1})
		return lastErr == nil && hook.Conversions().Sub(flipped).TotalObjects() >= objects, nil
	})
	if err != nil {
		t.Fatalf("%s: the API server did not build its caches for the new storage within a minute (last list error: %v); the webhook converted %s", r.Plural, lastErr, hook.Conversions().Sub(flipped))
	}
	built := hook.Quiet(t)
	t.Logf("%s: the API server's caches after the storage change: %s", r.Plural, built)
	return hook
}

// migrate runs a migration of gvr and returns the conversions it cost,
// counted once the webhook is quiet: the API server's watch caches convert
// after the writes are answered.
func migrate(t *testing.T, m *migrator.Migrator, hook *framework.ConversionWebhook, gvr schema.GroupVersionResource) framework.Conversions {
	t.Helper()
	before := hook.Conversions()
	res, err := m.Run(framework.Context(t, 5*time.Minute), migrator.Request{Resource: gvr})
	if err != nil {
		t.Fatalf("migrate %s: %v", gvr, err)
	}
	if res.Progress.Listed != objects || res.Progress.Failed != 0 {
		t.Fatalf("migrate %s: progress %+v, want %d listed and none failed", gvr, res.Progress, objects)
	}
	return hook.Quiet(t).Sub(before)
}

// discovered is r as svm's trigger finds it: in its preferred version.
func discovered(t *testing.T, disc *discovery.DiscoveryClient, r framework.Resource) resources.Resource {
	t.Helper()
	found, err := resources.Discover(disc)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range found.Resources {
		if res.GroupResource() == r.GVR("").GroupResource() {
			return res
		}
	}
	t.Fatalf("%s not discovered", r.Plural)
	return resources.Resource{}
}

// servedLists are every served group version's resources.
func servedLists(t *testing.T, disc *discovery.DiscoveryClient) []*metav1.APIResourceList {
	t.Helper()
	_, lists, err := disc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	return lists
}

func perObject(c framework.Conversions) float64 { return float64(c.TotalReviews()) / objects }

// inStorageVersion returns r in the version its objects are stored in, when
// lists show that version serving r's resource with list and patch, and r
// unchanged otherwise (r is in it already, the server reports no hash, or
// the storage version is not served).
//
// lists are every group version the server serves, from the per-group-version
// discovery documents (they carry storageVersionHash); DiscoverServed and
// ServerGroupsAndResources on a client from NewDiscoveryClient return them.
// The storage version is the one whose StorageVersionHash, computed from the
// group, the version and the kind it serves the resource as, is the hash
// discovery reports.
//
// The test compares a migration through the preferred version with one
// through the storage version (which an operator chooses by naming it:
// svm migrate RESOURCE.VERSION.GROUP).
func inStorageVersion(lists []*metav1.APIResourceList, r resources.Resource) resources.Resource {
	if r.StorageVersionHash == "" || resources.StorageVersionHash(r.Group, r.Version, r.Kind) == r.StorageVersionHash {
		return r
	}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil || gv.Group != r.Group || gv.Version == r.Version {
			continue
		}
		for _, ar := range list.APIResources {
			// The version must store what r's version stores (the same
			// hash) and be that storage (its own hash).
			if ar.Name != r.Resource || ar.StorageVersionHash != r.StorageVersionHash ||
				resources.StorageVersionHash(gv.Group, gv.Version, ar.Kind) != r.StorageVersionHash ||
				!slices.Contains(ar.Verbs, "list") || !slices.Contains(ar.Verbs, "patch") {
				continue
			}
			r.Version, r.Kind = gv.Version, ar.Kind
			return r
		}
	}
	return r
}
