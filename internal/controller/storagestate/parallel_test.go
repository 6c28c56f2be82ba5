package storagestate

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// TestRoundAppliesResourcesSideBySide: a round that has a migration to
// create for each of 40 resources, whose creates each take a while,
// creates them several at once and at most applyWorkers at once, each
// resource's once.
func TestRoundAppliesResourcesSideBySide(t *testing.T) {
	const resources = 40
	k := newCluster(t)
	var mu sync.Mutex
	inFlight, most := 0, 0
	k.c.Client = interceptor.NewClient(k.client.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*migrationv1alpha1.StorageVersionMigration); !ok {
				return c.Create(ctx, obj, opts...)
			}
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			inFlight--
			mu.Unlock()
			return c.Create(ctx, obj, opts...)
		},
	})
	for i := range resources {
		k.disc.Resources = append(k.disc.Resources, &metav1.APIResourceList{
			// Resources of one hash share storage: each has its own.
			GroupVersion: fmt.Sprintf("g%02d.example.com/v1", i),
			APIResources: []metav1.APIResource{{
				Name: "widgets", Kind: fmt.Sprintf("Widget%02d", i), Namespaced: true, Verbs: metav1.Verbs{"list", "patch"}, StorageVersionHash: fmt.Sprintf("h%02d", i),
			}},
		})
	}
	k.reconcile()
	for i := range resources {
		name := fmt.Sprintf("widgets.g%02d.example.com", i)
		if got := k.migrations(name)[fmt.Sprintf("h%02d", i)]; len(got) != 1 {
			t.Errorf("%s: %d migrations to its hash, want 1", name, len(got))
		}
	}
	if most < 2 || most > applyWorkers {
		t.Errorf("at most %d migrations created at once, want between 2 and %d", most, applyWorkers)
	}
}

// TestASpacedRoundDecidesWhatChangedWhileItWaited: a change that asks for
// a round too soon after the last one (a storage version hash changed, its
// rediscovery asked for) gets none at once, only a requeue for the time
// left; the round then decides the change: it is deferred, never lost.
func TestASpacedRoundDecidesWhatChangedWhileItWaited(t *testing.T) {
	k := newCluster(t)
	k.serve("cm1", "w1")
	k.reconcile()
	// The last round's reads and decisions took 3 s: the next may start
	// 6 s after it.
	now := k.clock.Now()
	k.c.spacing.Ended(now.Add(-3*time.Second), now)

	k.serve("cm1", "w2")
	k.c.rediscover.Store(true)
	k.clock.Step(time.Second)
	expectRequeue(t, k.reconcile(), 5*time.Second)
	if got := k.migrations("widgets.example.com")["w2"]; len(got) != 0 {
		t.Fatalf("a round held back by spacing made %d migrations to w2", len(got))
	}

	k.clock.Step(5 * time.Second)
	k.reconcile()
	if got := k.migrations("widgets.example.com")["w2"]; len(got) != 1 {
		t.Errorf("%d migrations to w2 after the spaced round, want 1", len(got))
	}
	if s := k.state("widgets.example.com"); s.Status.CurrentStorageVersionHash != "w2" {
		t.Errorf("storage state records %q as current, want w2", s.Status.CurrentStorageVersionHash)
	}
}
