// Package migrator_test runs svm's migration engine against a real API
// server and checks every outcome in etcd's raw bytes.
package migrator_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/controlplane"
	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/framework"
)

// newMigrator builds a Migrator whose requests are counted.
func newMigrator(t *testing.T, cfg *rest.Config, opts migrator.Options) (*migrator.Migrator, *framework.RequestCounter) {
	t.Helper()
	cfg, counter := framework.Counting(cfg)
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return migrator.New(md, disc, opts), counter
}

// flippedWidgets creates n widgets in v1 over four namespaces, flips the
// storage version to v2 and returns the snapshot taken before the flip.
func flippedWidgets(t *testing.T, env *framework.Env, n int) framework.Snapshot {
	t.Helper()
	env.CreateWidgetCRD(t, "v1")
	env.CreateWidgets(t, "v1", []string{"ns-a", "ns-b", "ns-c", "ns-d"}, n)
	before := env.TakeSnapshot(t, framework.Widgets)
	hash := env.StorageVersionHash(t, framework.Widgets)
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	env.WaitStorageVersionHashChange(t, framework.Widgets, hash)
	return before
}

var widgetsPrefix = framework.EtcdPrefix(framework.Widgets.GroupResource())

func TestRewritesEveryObjectWithoutChangingIt(t *testing.T) {
	env := framework.Start(t, controlplane.Options{})
	const n = 1200
	before := flippedWidgets(t, env, n)
	m, requests := newMigrator(t, env.Config, migrator.Options{ChunkSize: 250})

	var chunks []migrator.State
	res, err := m.Run(framework.Context(t, 5*time.Minute), migrator.Request{
		Resource: framework.Widgets,
		OnChunk: func(_ context.Context, s migrator.State) error {
			chunks = append(chunks, s)
			return nil
		},
	})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	// Content, generation, uid and field managers are all unchanged: the
	// write added no managedFields entry and bumped no generation.
	env.ExpectUnchanged(t, framework.Widgets, before)
	want := migrator.Progress{Listed: n, Rewritten: n}
	if diff := cmp.Diff(want, res.Progress, ignoreRemaining); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	// The last chunk says nothing is left, whatever the server estimated
	// for the chunk before: a status that kept the old estimate would show
	// an unfinished total forever.
	if last := chunks[len(chunks)-1].Progress.RemainingEstimate; last == nil || *last != 0 {
		t.Errorf("remaining estimate after the last chunk = %v, want 0", last)
	}
	if res.Checkpoint == "" || res.StorageVersionHash != env.StorageVersionHash(t, framework.Widgets) {
		t.Errorf("checkpoint %q, hash %q: want a checkpoint and the current hash", res.Checkpoint, res.StorageVersionHash)
	}
	// One saved state per chunk; the last has no continue token.
	if len(chunks) != n/250+1 || chunks[len(chunks)-1].ContinueToken != "" || chunks[0].ContinueToken == "" {
		t.Errorf("saved %d chunk states (last token %q), want %d ending with an empty token", len(chunks), chunks[len(chunks)-1].ContinueToken, n/250+1)
	}
	// One write per object, a few reads.
	if got := requests.Count("PATCH"); got != n {
		t.Errorf("%d patches, want exactly %d", got, n)
	}
	if got := requests.Count("GET"); got > n/250+3 {
		t.Errorf("%d GET requests, want at most %d", got, n/250+3)
	}

	// A second run finds nothing to re-encode: the API server skips writes
	// whose bytes are unchanged, so resourceVersions do not move.
	rvBefore := env.TakeSnapshot(t, framework.Widgets)
	if _, err := m.Run(framework.Context(t, 5*time.Minute), migrator.Request{Resource: framework.Widgets}); err != nil {
		t.Fatalf("second migration: %v", err)
	}
	env.ExpectUnchanged(t, framework.Widgets, rvBefore)
}

// runUntilCrash migrates widgets until at least listed objects are saved,
// then stops as a crash would, and returns the last saved state.
func runUntilCrash(t *testing.T, m *migrator.Migrator, listed int64) migrator.State {
	t.Helper()
	var saved migrator.State
	crash := errors.New("crash")
	_, err := m.Run(framework.Context(t, 5*time.Minute), migrator.Request{
		Resource: framework.Widgets,
		OnChunk: func(_ context.Context, s migrator.State) error {
			saved = s
			if s.Progress.Listed >= listed {
				return crash
			}
			return nil
		},
	})
	if !errors.Is(err, crash) {
		t.Fatalf("first run: %v, want the crash", err)
	}
	return saved
}

var ignoreRemaining = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".RemainingEstimate" }, cmp.Ignore())

func TestResumesFromSavedState(t *testing.T) {
	env := framework.Start(t, controlplane.Options{})
	const n = 1000
	before := flippedWidgets(t, env, n)
	m, requests := newMigrator(t, env.Config, migrator.Options{ChunkSize: 200})

	// Stop after the second chunk, as a crash would.
	saved := runUntilCrash(t, m, 400)
	if got := env.StoredVersions(t, widgetsPrefix); got["example.com/v2"] != 400 {
		t.Fatalf("after the crash: %v, want 400 in v2", got)
	}
	res, err := m.Run(framework.Context(t, 5*time.Minute), migrator.Request{Resource: framework.Widgets, Resume: &saved})
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	env.ExpectUnchanged(t, framework.Widgets, before)
	if res.Progress.Rewritten != n || requests.Count("PATCH") != n {
		t.Errorf("rewritten %d with %d patches, want %d: resuming must not redo finished chunks", res.Progress.Rewritten, requests.Count("PATCH"), n)
	}
}

func TestExpiredContinueTokenRestartsWithoutRewritingAgain(t *testing.T) {
	env := framework.Start(t, controlplane.Options{})
	const n = 600
	flippedWidgets(t, env, n)
	m, requests := newMigrator(t, env.Config, migrator.Options{ChunkSize: 200})

	saved := runUntilCrash(t, m, 1)
	// Compact etcd past the token's snapshot: the token is now 410 Gone.
	ctx := framework.Context(t, time.Minute)
	status, err := env.Etcd.Status(ctx, env.CP.EtcdURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Etcd.Compact(ctx, status.Header.Revision); err != nil {
		t.Fatalf("compact: %v", err)
	}
	_, err = env.Dynamic.Resource(framework.Widgets).List(ctx, metav1.ListOptions{Limit: 200, Continue: saved.ContinueToken})
	if err == nil {
		t.Fatal("continue token still valid after compaction; the test would prove nothing")
	}
	res, err := m.Run(framework.Context(t, 5*time.Minute), migrator.Request{Resource: framework.Widgets, Resume: &saved})
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	// The first chunk's objects are newer than the checkpoint now: no write.
	if got := requests.Count("PATCH"); got != n {
		t.Errorf("%d patches, want %d (nothing rewritten twice)", got, n)
	}
	if res.Progress.Rewritten != n {
		t.Errorf("rewritten %d, want %d", res.Progress.Rewritten, n)
	}
}

func TestConcurrentWritersLoseNothing(t *testing.T) {
	env := framework.Start(t, controlplane.Options{})
	const n = 1500
	before := flippedWidgets(t, env, n)
	// Slow the migration down so the writers really overlap it.
	m, _ := newMigrator(t, env.Config, migrator.Options{ChunkSize: 100, Workers: 2, Limiter: rate.NewLimiter(400, 1)})

	ctx := framework.Context(t, 5*time.Minute)
	type outcome struct {
		res migrator.Result
		err error
	}
	done := make(chan outcome, 1)
	var started atomic.Bool
	go func() {
		res, err := m.Run(ctx, migrator.Request{Resource: framework.Widgets, OnProgress: func(migrator.Progress) { started.Store(true) }})
		done <- outcome{res, err}
	}()

	// Update a sixth and delete a sixth of the objects while it runs.
	updated, deleted := map[string]bool{}, map[string]bool{}
	namespaces := []string{"ns-a", "ns-b", "ns-c", "ns-d"}
	for i := 0; i < n; i += 3 {
		ns, name := namespaces[i%4], fmt.Sprintf("widget-%05d", i)
		client := env.Dynamic.Resource(framework.Widgets).Namespace(ns)
		if i%2 == 0 {
			patch := fmt.Appendf(nil, `{"spec":{"updatedBy":"writer-%d"}}`, i)
			if _, err := client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatalf("update %s: %v", name, err)
			}
			updated[ns+"/"+name] = true
		} else {
			if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete %s: %v", name, err)
			}
			deleted[ns+"/"+name] = true
		}
	}
	out := <-done
	if !started.Load() {
		t.Error("migration reported no progress while the writers ran")
	}
	if out.err != nil {
		t.Fatalf("migration failed: %v", out.err)
	}
	if got := out.res.Progress; got.Rewritten+got.Skipped != n || got.Failed != 0 {
		t.Errorf("progress %+v: want rewritten+skipped = %d and no failures", got, n)
	}
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n - len(deleted)})
	after := env.TakeSnapshot(t, framework.Widgets)
	for key := range updated {
		spec, _ := after[key]["spec"].(map[string]any)
		if spec == nil || spec["updatedBy"] == nil {
			t.Errorf("%s lost its concurrent update: spec %v", key, spec)
		}
	}
	touched := make([]string, 0, len(updated)+len(deleted))
	for key := range updated {
		touched = append(touched, key)
	}
	for key := range deleted {
		touched = append(touched, key)
	}
	untouched, after := before.Without(touched...), after.Without(touched...)
	if diff := untouched.Diff(after); diff != "" {
		t.Errorf("untouched objects changed (-before +after):\n%s", diff)
	}
}

func TestTerminalErrorsFailFastWithBoundedRequests(t *testing.T) {
	env := framework.Start(t, controlplane.Options{})
	env.CreateWidgetCRD(t, "v1")
	env.CreateWidgets(t, "v1", []string{"default"}, 10)

	noAccess := rest.CopyConfig(env.Config)
	noAccess.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	tests := []struct {
		name       string
		cfg        *rest.Config
		resource   schema.GroupVersionResource
		wantReason string
	}{
		{"resource does not exist", env.Config, schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}, "ResourceNotFound"},
		{"group does not exist", env.Config, schema.GroupVersionResource{Group: "nowhere.example.com", Version: "v1", Resource: "things"}, "ResourceNotFound"},
		{"version does not exist", env.Config, schema.GroupVersionResource{Group: "example.com", Version: "v9", Resource: "widgets"}, "ResourceNotFound"},
		{"not listable", env.Config, schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "selfsubjectaccessreviews"}, "NotMigratable"},
		{"forbidden", noAccess, framework.Widgets, "Forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, requests := newMigrator(t, tt.cfg, migrator.Options{})
			start := time.Now()
			_, err := m.Run(framework.Context(t, time.Minute), migrator.Request{Resource: tt.resource})
			var terminal *migrator.TerminalError
			if !errors.As(err, &terminal) {
				t.Fatalf("error %v, want a TerminalError", err)
			}
			if terminal.Reason != tt.wantReason {
				t.Errorf("reason %q (%v), want %q", terminal.Reason, err, tt.wantReason)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s to fail", took)
			}
			if got := requests.Count(""); got > 3 {
				t.Errorf("%d requests before failing, want at most 3", got)
			}
			if got := requests.Count("PATCH"); got != 0 {
				t.Errorf("%d writes", got)
			}
		})
	}
}
