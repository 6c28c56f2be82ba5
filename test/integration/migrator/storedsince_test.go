package migrator_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestObjectsWrittenSinceTheStorageChangeCostNoRequest: given the revision
// from which every API server stores the resource in its current version
// (what the trigger records), the engine sends no request for the objects
// written since, by their own writers or by an earlier migration; and none
// of that applies when the revision was recorded for another storage
// version than the one the engine finds.
func TestObjectsWrittenSinceTheStorageChangeCostNoRequest(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	const n = 400
	r, namespaces, before := flippedObjects(t, env, n)
	gvr := r.GVR("v1")
	ctx := framework.Context(t, 5*time.Minute)
	// The revision now, read as the trigger reads it: the flip is behind
	// it, so every write after it is in v2.
	list, err := metadata.NewForConfigOrDie(env.Config).Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	since := &migrator.StoredSince{Hash: env.StorageVersionHash(t, gvr), Revision: list.ResourceVersion}

	// The objects' own writers rewrite every other one.
	updated := map[string]bool{}
	for i := 0; i < n; i += 2 {
		ns, name := namespaces[i%4], fmt.Sprintf("obj-%05d", i)
		patch := fmt.Appendf(nil, `{"spec":{"updatedBy":"writer-%s"}}`, name)
		if _, err := env.Dynamic.Resource(gvr).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		updated[ns+"/"+name] = true
	}

	// The migration writes only the objects their writers did not.
	run := func(since *migrator.StoredSince) (migrator.Progress, int) {
		t.Helper()
		m, requests := framework.NewMigrator(t, env.Config, migrator.Options{ChunkSize: 100})
		res, err := m.Run(ctx, migrator.Request{Resource: gvr, StoredSince: since})
		if err != nil {
			t.Fatalf("migrate: %v", err)
		}
		return res.Progress, requests.Count("PATCH")
	}
	p, patches := run(since)
	if patches != n/2 || p.Restored != n/2 || p.WrittenSinceChange != n/2 || p.SkippedWithoutWrite != n/2 {
		t.Errorf("first migration: %d patches, progress %+v; want %d written and re-stored, %d written since the change without a request", patches, p, n/2, n/2)
	}
	env.ExpectStored(t, r.EtcdPrefix(), inV2(r, n))
	framework.ExpectWritesKept(t, before, env.TakeSnapshot(t, gvr), updated, nil)

	// A second migration for the same change: a list, and no write.
	p, patches = run(since)
	if patches != 0 || p.Listed != n || p.WrittenSinceChange != n || p.Migrated() != 0 {
		t.Errorf("second migration: %d patches, progress %+v; want none, all %d written since the change", patches, p, n)
	}

	// A revision recorded for another storage version than the one the
	// server reports says nothing: every object is written.
	p, patches = run(&migrator.StoredSince{Hash: "not-" + since.Hash, Revision: since.Revision})
	if patches != n || p.WrittenSinceChange != 0 {
		t.Errorf("with another version's revision: %d patches, %d written since the change; want all %d written, none skipped", patches, p.WrittenSinceChange, n)
	}
}
