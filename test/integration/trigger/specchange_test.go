package trigger_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/trigger"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestCABundleRotationsNeitherStopNorRestartAMigration: the widgets' CRD
// converts through a webhook, and its caBundle is rotated every 30 seconds
// for five minutes, and on until svm's migration has succeeded (a spec
// change, each moving the CRD's generation, that leaves the storage version
// alone), while svm, waiting the default settle delay and drain margin
// (2m15s), migrates 10,000 widgets stored in v1 to v2. Were every spec
// change a storage move, each rotation would restart the wait, and the
// widgets would never be migrated. svm sees every generation as the CRD
// watch delivers it, one after another, even while a long round (first
// sight) runs: the one migration it makes is neither stopped nor started
// over, even across a rotation while it rewrites, it succeeds,
// storedVersions are pruned to [v2], and etcd holds every widget in v2 with
// its content unchanged.
func TestCABundleRotationsNeitherStopNorRestartAMigration(t *testing.T) {
	t.Parallel()
	const n = 10000
	const every, rotateFor = 30 * time.Second, 5 * time.Minute
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateWidgetCRD(t, "v1")
	// Stored in v1, written through v2: the migration has no managedFields
	// entry to move off v1, only objects to rewrite.
	env.SeedWidgetsWrittenThrough(t, "v1", "v2", []string{"ns-a", "ns-b"}, n)
	env.StartConversionWebhook(t, framework.WidgetResource)
	env.SetStorage(t, framework.WidgetResource, "v2")
	v2 := framework.Widgets
	v2.Version = "v2"
	before := env.TakeSnapshotInPages(t, v2)
	prefix := framework.EtcdPrefix(framework.Widgets.GroupResource())
	env.ExpectStored(t, prefix, map[string]int{"example.com/v1": n})
	t.Logf("%d widgets stored in v1, snapshot taken; starting svm", n)

	// The test's flags, but the default drain margin: longer than the
	// time between two rotations.
	env.StartSVM(t, framework.ControllerArgs("--leader-elect=false", "--trigger-interval", "2m", "--crd-drain-margin", "2m")...)
	r := newRotator(t, env)
	r.rotateUntil(t, time.Now().Add(rotateFor), every)

	t.Logf("%d rotations, %d while the migration rewrote widgets; the CRD went from generation %d to %d", r.rotations, r.duringRun, r.firstGeneration, crdGeneration(t, r.env))
	if r.duringRun == 0 {
		t.Error("no rotation fell while the migration rewrote widgets: nothing tested of the guard")
	}
	if len(r.migrations) != 1 {
		t.Errorf("svm made migrations %v of the widgets, want one: a rotation stopped or replaced it", r.migrations)
	}
	if got := ownedMigrations(t, env); got[hashV2] != 1 || len(got) != 1 {
		t.Errorf("svm's migrations of the widgets by hash %v, want one to v2", got)
	}
	if moves := storageMoves(t, env, r); len(moves) > 0 {
		t.Errorf("a rotation was taken for a storage move: %v", moves)
	}
	counts := env.WaitPrunedSafely(t, framework.WidgetResource, "v1", time.Minute)
	if got := env.CRDStoredVersions(t, framework.WidgetsCRDName); !slices.Equal(got, []string{"v2"}) {
		t.Errorf("storedVersions %v, want [v2] (etcd holds %v)", got, counts)
	}
	env.ExpectStored(t, prefix, map[string]int{"example.com/v2": n})
	env.ExpectUnchangedInPages(t, v2, before)
}

// storageMoves says what took a rotation for a storage move: the
// StorageState dating the storage from after the first rotation, an event
// of a storage change, of the migration stopped by the trigger or started
// over.
func storageMoves(t *testing.T, env *framework.Env, r *rotator) []string {
	t.Helper()
	var moves []string
	state := waitState(t, env, "v2 migrated", persisted(hashV2))
	if since := state.Status.CurrentStorageVersionSince; since == nil || !since.Time.Before(r.firstRotation) {
		moves = append(moves, fmt.Sprintf("the StorageState dates the storage since %v, after the first rotation at %s", since, r.firstRotation.UTC()))
	}
	for reason, n := range framework.EventReasons(env.Events(t, "StorageState", stateName)) {
		if reason == "StorageChanged" {
			moves = append(moves, fmt.Sprintf("the StorageState has %d %s events", n, reason))
		}
	}
	for _, name := range r.migrations {
		got := framework.EventReasons(env.Events(t, "StorageVersionMigration", name))
		for _, reason := range []string{"Warning/StorageVersionChanged", "Superseded"} {
			if got[reason] > 0 {
				moves = append(moves, fmt.Sprintf("migration %s has events %v", name, got))
			}
		}
	}
	return moves
}

// rotator rotates the caBundle of the widgets' conversion webhook: the
// webhook's own certificate, with an unrelated CA appended, a new one each
// time. The API server still verifies the webhook, and every rotation is a
// spec change.
type rotator struct {
	env             *framework.Env
	caBundle        []byte
	firstGeneration int64
	// rotations counts every rotation, duringRun those made while svm's
	// migration rewrote widgets (it had listed some, and had not ended).
	rotations, duringRun int
	// migrations names every migration of svm's of the widgets seen.
	migrations []string
	// firstRotation is when the first rotation was made.
	firstRotation time.Time
}

func newRotator(t *testing.T, env *framework.Env) *rotator {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: framework.WidgetsCRDName}, crd); err != nil {
		t.Fatal(err)
	}
	return &rotator{env: env, caBundle: crd.Spec.Conversion.Webhook.ClientConfig.CABundle, firstGeneration: crd.Generation}
}

// rotateUntil rotates every `every` until until and, past it, until svm's
// migration of the widgets has succeeded (at most five minutes more); and
// once more as soon as the migration is seen rewriting widgets, so that one
// falls between the guard's reads before and after.
func (r *rotator) rotateUntil(t *testing.T, until time.Time, every time.Duration) {
	t.Helper()
	next, limit := time.Now().Add(every), until.Add(5*time.Minute)
	for {
		m := r.observe(t)
		running := m != nil && !m.IsFinished() && m.Status.Progress.Listed > 0
		done := m != nil && framework.Succeeded(m)
		switch {
		case done && time.Now().After(until):
			return
		case time.Now().After(limit):
			t.Fatalf("svm's migration of the widgets has not succeeded 5 minutes after the rotations were to end (%d rotations, migrations %v)", r.rotations, r.migrations)
		case running && r.duringRun == 0, time.Now().After(next):
			r.rotate(t)
			next = time.Now().Add(every)
			if after := r.observe(t); running && after != nil && after.Name == m.Name && !after.IsFinished() {
				r.duringRun++
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// observe notes svm's migrations of the widgets, and returns the last
// made, nil when there is none.
func (r *rotator) observe(t *testing.T) *migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := r.env.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	var last *migrationv1alpha1.StorageVersionMigration
	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.Resource.Resource != "widgets" || !trigger.IsOwned(m) {
			continue
		}
		if !slices.Contains(r.migrations, m.Name) {
			r.migrations = append(r.migrations, m.Name)
		}
		if last == nil || last.CreationTimestamp.Before(&m.CreationTimestamp) {
			last = m
		}
	}
	return last
}

// rotate writes the caBundle anew, with another unrelated CA.
func (r *rotator) rotate(t *testing.T) {
	t.Helper()
	unrelated, _, err := certutil.GenerateSelfSignedCertKey("unrelated.example.com", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := framework.Context(t, time.Minute)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := r.env.Client.Get(ctx, client.ObjectKey{Name: framework.WidgetsCRDName}, crd); err != nil {
			return err
		}
		crd.Spec.Conversion.Webhook.ClientConfig.CABundle = append(slices.Clone(r.caBundle), unrelated...)
		return r.env.Client.Update(ctx, crd)
	})
	if err != nil {
		t.Fatalf("rotate the conversion webhook's caBundle: %v", err)
	}
	if r.rotations == 0 {
		r.firstRotation = time.Now()
	}
	r.rotations++
}

// crdGeneration is the widgets' CRD's generation now.
func crdGeneration(t *testing.T, env *framework.Env) int64 {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: framework.WidgetsCRDName}, crd); err != nil {
		t.Fatal(err)
	}
	return crd.Generation
}

// TestAGenerationUnseenIsAStorageMove: while svm's process is stopped, the
// widgets' CRD gets one spec change that leaves its storage version alone
// (a printer column added): svm, resumed, sees the next generation, and
// the storage stays as it was (since, revision, no StorageChanged). Then,
// stopped again, two such changes: svm saw neither, and the generation it
// missed may have hidden a flip and a flip back, so it counts a storage
// move: since restarts, the revision is dropped, and the StorageState says
// StorageChanged.
func TestAGenerationUnseenIsAStorageMove(t *testing.T) {
	t.Parallel()
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"default"}, 20)
	svm := env.StartSVM(t, args("10m")...)
	first := waitState(t, env, "migrated, with a revision", func(s *migrationv1alpha1.StorageState) bool {
		return persisted(hashV1)(s) && s.Status.CurrentStorageVersionRevision != ""
	})
	generation := crdGeneration(t, env)
	at := func(generation int64) func(*migrationv1alpha1.StorageState) bool {
		return func(s *migrationv1alpha1.StorageState) bool {
			return strings.HasSuffix(s.Status.StorageFingerprint, fmt.Sprintf("/%d/v1", generation)) ||
				strings.HasSuffix(s.Status.StorageFingerprint, fmt.Sprintf("..%d/v1", generation))
		}
	}

	svm.Pause(t)
	addPrinterColumn(t, env, "one")
	svm.Resume(t)
	next := waitState(t, env, "the next generation recorded", at(generation+1))
	if !next.Status.CurrentStorageVersionSince.Equal(first.Status.CurrentStorageVersionSince) ||
		next.Status.CurrentStorageVersionRevision != first.Status.CurrentStorageVersionRevision {
		t.Errorf("one spec change seen: since %v, revision %q; want them kept, %v and %q (fingerprint %s, was %s)",
			next.Status.CurrentStorageVersionSince, next.Status.CurrentStorageVersionRevision,
			first.Status.CurrentStorageVersionSince, first.Status.CurrentStorageVersionRevision, next.Status.StorageFingerprint, first.Status.StorageFingerprint)
	}

	svm.Pause(t)
	addPrinterColumn(t, env, "two")
	addPrinterColumn(t, env, "three")
	svm.Resume(t)
	moved := waitState(t, env, "the generations after a gap recorded", at(generation+3))
	if !first.Status.CurrentStorageVersionSince.Before(moved.Status.CurrentStorageVersionSince) || moved.Status.CurrentStorageVersionRevision != "" {
		t.Errorf("a generation unseen: since %v (was %v), revision %q; want since restarted and no revision (fingerprint %s)",
			moved.Status.CurrentStorageVersionSince, first.Status.CurrentStorageVersionSince, moved.Status.CurrentStorageVersionRevision, moved.Status.StorageFingerprint)
	}
	// Events are sent after the status is written, through a broadcaster
	// that a loaded machine delays: wait for the one expected.
	var got map[string]int
	framework.Eventually(t, "the StorageChanged event", time.Minute, func(context.Context) (bool, error) {
		got = framework.EventReasons(env.Events(t, "StorageState", stateName))
		return got["StorageChanged"] > 0, nil
	})
	if got["StorageChanged"] != 1 {
		t.Errorf("the StorageState's events %v, want one StorageChanged: after the gap, not after the change seen", got)
	}
}

// addPrinterColumn adds a printer column named name to the widgets' CRD's
// v1: a spec change that leaves the storage version alone.
func addPrinterColumn(t *testing.T, env *framework.Env, name string) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: framework.WidgetsCRDName}, crd); err != nil {
			return err
		}
		v := &crd.Spec.Versions[0]
		v.AdditionalPrinterColumns = append(v.AdditionalPrinterColumns, apiextensionsv1.CustomResourceColumnDefinition{Name: name, Type: "string", JSONPath: ".metadata.name"})
		return env.Client.Update(ctx, crd)
	})
	if err != nil {
		t.Fatalf("add printer column %s: %v", name, err)
	}
}
