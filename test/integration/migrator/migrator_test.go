// Package migrator_test runs svm's migration engine against a real API
// server and checks every outcome in etcd's raw bytes.
package migrator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/time/rate"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// flippedObjects creates a resource of the test's own with n objects in v1
// over four namespaces of its own, makes v2 the storage version, and
// returns the resource, the namespaces and the snapshot taken before the
// flip. Objects are named obj-00000 on, object i in namespace i%4.
func flippedObjects(t *testing.T, env *framework.Env, n int) (framework.Resource, []string, framework.Snapshot) {
	t.Helper()
	r := env.NewResource(t)
	prefix := framework.TestName(t)
	namespaces := []string{prefix + "-a", prefix + "-b", prefix + "-c", prefix + "-d"}
	return r, namespaces, env.StoredInOldVersion(t, r, namespaces, n)
}

// inV2 is what etcd holds for r once n objects are migrated.
func inV2(r framework.Resource, n int) map[string]int { return map[string]int{r.Group + "/v2": n} }

// The tests that run the engine in process on a resource of their own
// share a control plane: the requests they count are their own client's.
func TestRewritesEveryObjectWithoutChangingIt(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	const n = 1200
	r, _, before := flippedObjects(t, env, n)
	m, requests := framework.NewMigrator(t, env.Config, migrator.Options{ChunkSize: 250})

	var chunks []migrator.State
	res, err := m.Run(framework.Context(t, 5*time.Minute), migrator.Request{
		Resource: r.GVR("v1"),
		OnChunk: func(_ context.Context, s migrator.State) error {
			chunks = append(chunks, s)
			return nil
		},
	})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	env.ExpectStored(t, r.EtcdPrefix(), inV2(r, n))
	// Content, generation, uid and field managers are all unchanged: the
	// write added no managedFields entry and bumped no generation.
	env.ExpectUnchanged(t, r.GVR("v1"), before)
	// Every widget was in v1: every write stored new bytes.
	want := migrator.Progress{Counts: migrator.Counts{Listed: n, Restored: n}}
	if diff := cmp.Diff(want, res.Progress, ignoreRemaining); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	// The last chunk says nothing is left, whatever the server estimated
	// for the chunk before: a status that kept the old estimate would show
	// an unfinished total forever.
	if last := chunks[len(chunks)-1].Progress.RemainingEstimate; last == nil || *last != 0 {
		t.Errorf("remaining estimate after the last chunk = %v, want 0", last)
	}
	if res.Checkpoint == "" || res.StorageVersionHash != env.StorageVersionHash(t, r.GVR("v1")) {
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
	rvBefore := env.TakeSnapshot(t, r.GVR("v1"))
	if _, err := m.Run(framework.Context(t, 5*time.Minute), migrator.Request{Resource: r.GVR("v1")}); err != nil {
		t.Fatalf("second migration: %v", err)
	}
	env.ExpectUnchanged(t, r.GVR("v1"), rvBefore)
}

// runUntilCrash migrates gvr until at least listed objects are saved,
// then stops as a crash would, and returns the last saved state.
func runUntilCrash(t *testing.T, m *migrator.Migrator, gvr schema.GroupVersionResource, listed int64) migrator.State {
	t.Helper()
	var saved migrator.State
	crash := errors.New("crash")
	_, err := m.Run(framework.Context(t, 5*time.Minute), migrator.Request{
		Resource: gvr,
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
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	const n = 1000
	r, _, before := flippedObjects(t, env, n)
	m, requests := framework.NewMigrator(t, env.Config, migrator.Options{ChunkSize: 200})

	// Stop after the second chunk, as a crash would.
	saved := runUntilCrash(t, m, r.GVR("v1"), 400)
	if got := env.StoredVersions(t, r.EtcdPrefix()); got[r.Group+"/v2"] != 400 {
		t.Fatalf("after the crash: %v, want 400 in v2", got)
	}
	res, err := m.Run(framework.Context(t, 5*time.Minute), migrator.Request{Resource: r.GVR("v1"), Resume: &saved})
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	env.ExpectStored(t, r.EtcdPrefix(), inV2(r, n))
	env.ExpectUnchanged(t, r.GVR("v1"), before)
	if res.Progress.Migrated() != n || requests.Count("PATCH") != n {
		t.Errorf("rewritten %d with %d patches, want %d: resuming must not redo finished chunks", res.Progress.Migrated(), requests.Count("PATCH"), n)
	}
}

// servedByEtcd is a control plane whose continue tokens and watches are
// served from etcd, which compaction expires: with ListFromCacheSnapshot
// (on by default since 1.34), a token the watch cache holds a snapshot for
// outlives etcd's compaction, and a test of what svm does when one expires
// would prove nothing. The cache holds snapshots once the resource has
// changed since its storage moved.
var servedByEtcd = controlplane.Options{APIServerFlags: []string{"--feature-gates=ListFromCacheSnapshot=false"}}

// A control plane of its own: compacting etcd would expire every other
// test's continue tokens and watches.
func TestExpiredContinueTokenRestartsWithoutRewritingAgain(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, servedByEtcd)
	const n = 600
	r, _, _ := flippedObjects(t, env, n)
	m, requests := framework.NewMigrator(t, env.Config, migrator.Options{ChunkSize: 200})

	saved := runUntilCrash(t, m, r.GVR("v1"), 1)
	// Compact etcd past the token's snapshot: the token is now 410 Gone.
	env.CompactEtcd(t)
	ctx := framework.Context(t, time.Minute)
	if _, err := env.Dynamic.Resource(r.GVR("v1")).List(ctx, metav1.ListOptions{Limit: 200, Continue: saved.ContinueToken}); err == nil {
		t.Fatal("continue token still valid after compaction; the test would prove nothing")
	}
	res, err := m.Run(framework.Context(t, 5*time.Minute), migrator.Request{Resource: r.GVR("v1"), Resume: &saved})
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	env.ExpectStored(t, r.EtcdPrefix(), inV2(r, n))
	// The first chunk's objects are newer than the checkpoint now: no write.
	if got := requests.Count("PATCH"); got != n {
		t.Errorf("%d patches, want %d (nothing rewritten twice)", got, n)
	}
	if res.Progress.Migrated() != n {
		t.Errorf("rewritten %d, want %d", res.Progress.Migrated(), n)
	}
}

func TestConcurrentWritersLoseNothing(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	const n = 1500
	r, namespaces, before := flippedObjects(t, env, n)
	// Slow the migration down so the writers really overlap it.
	m, requests := framework.NewMigrator(t, env.Config, migrator.Options{ChunkSize: 100, Workers: 2, Limiter: rate.NewLimiter(400, 1)})

	ctx := framework.Context(t, 5*time.Minute)
	type outcome struct {
		res migrator.Result
		err error
	}
	done := make(chan outcome, 1)
	var started atomic.Bool
	go func() {
		res, err := m.Run(ctx, migrator.Request{Resource: r.GVR("v1"), OnProgress: func(migrator.Progress) { started.Store(true) }})
		done <- outcome{res, err}
	}()

	// Update a sixth and delete a sixth of the objects while it runs.
	updated, deleted := map[string]bool{}, map[string]bool{}
	for i := 0; i < n; i += 3 {
		ns, name := namespaces[i%4], fmt.Sprintf("obj-%05d", i)
		client := env.Dynamic.Resource(r.GVR("v1")).Namespace(ns)
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
	// Every object listed is rewritten or skipped. A list is one snapshot
	// while its continue token lasts; when the token expires (the API
	// server compacts etcd every 5 minutes, and its watch cache drops
	// snapshots) the list goes on at the latest version, where an object
	// deleted meanwhile is no longer listed. So all n are listed but for
	// some of the deleted ones. A deleted object svm reached first was
	// rewritten, and counted so, before its deletion: the others it
	// either found gone or did not list.
	got := out.res.Progress
	if got.Migrated()+got.Skipped() != got.Listed || got.Failed != 0 {
		t.Errorf("progress %+v: want every listed object rewritten or skipped, and no failures", got)
	}
	rewrittenFirst := 0
	for key := range deleted {
		ns, name, _ := strings.Cut(key, "/")
		if requests.Succeeded("PATCH", fmt.Sprintf("/apis/%s/v1/namespaces/%s/%s/%s", r.Group, ns, r.Plural, name)) {
			rewrittenFirst++
		}
	}
	unlisted := int64(n) - got.Listed
	t.Logf("of the %d deleted: %d found gone, %d not listed, %d rewritten before their deletion", len(deleted), got.Gone, unlisted, rewrittenFirst)
	if unlisted < 0 || got.Gone+unlisted+int64(rewrittenFirst) != int64(len(deleted)) {
		t.Errorf("progress %+v: %d of %d not listed, want only objects deleted meanwhile (%d deleted: %d found gone, %d rewritten before their deletion)",
			got, unlisted, n, len(deleted), got.Gone, rewrittenFirst)
	}
	env.ExpectStored(t, r.EtcdPrefix(), inV2(r, n-len(deleted)))
	after := env.TakeSnapshot(t, r.GVR("v1"))
	framework.ExpectWritesKept(t, before, after, updated, deleted)
}

func TestTerminalErrorsFailFastWithBoundedRequests(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	r := env.NewResource(t)
	env.CreateObjects(t, r, []string{framework.TestName(t)}, 10)

	noAccess := rest.CopyConfig(env.Config)
	noAccess.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	tests := []struct {
		name       string
		cfg        *rest.Config
		resource   schema.GroupVersionResource
		wantReason string
	}{
		{"resource does not exist", env.Config, schema.GroupVersionResource{Group: r.Group, Version: "v1", Resource: "gadgets"}, "ResourceNotFound"},
		{"group does not exist", env.Config, schema.GroupVersionResource{Group: "nowhere.example.com", Version: "v1", Resource: "things"}, "ResourceNotFound"},
		{"version does not exist", env.Config, schema.GroupVersionResource{Group: r.Group, Version: "v9", Resource: r.Plural}, "ResourceNotFound"},
		{"not listable", env.Config, schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "selfsubjectaccessreviews"}, "NotMigratable"},
		{"forbidden", noAccess, r.GVR("v1"), "Forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, requests := framework.NewMigrator(t, tt.cfg, migrator.Options{})
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

// TestObjectsWrittenByOthersCostNoWrite updates and deletes objects the
// migration has not reached yet, while it runs. Its list is one snapshot,
// so it still lists them with their old resourceVersions. At the first
// write answered by a conflict (someone else writes this resource) it
// starts a watch from the checkpoint, which tells it those objects need
// nothing: they cost no write. When etcd has compacted the checkpoint away
// the watch starts from the latest resourceVersion and still sees changes
// made after it. Without watch permission the same objects cost one write
// each, answered by a conflict or not found. Nothing is lost either way.
func TestObjectsWrittenByOthersCostNoWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		watch, compact bool
	}{
		{"with the watch", true, false},
		{"checkpoint compacted away", true, true},
		{"without watch permission", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Compacting etcd would expire other tests' continue tokens
			// and watches: that case has a control plane of its own.
			var env *framework.Env
			if tc.compact {
				env = framework.Start(t, servedByEtcd)
			} else {
				env = framework.Shared(t, controlplane.Options{})
			}
			const n = 1000
			r, namespaces, before := flippedObjects(t, env, n)
			nsA, nsD := namespaces[0], namespaces[3]
			cfg := env.Config
			if !tc.watch {
				cfg = listAndPatchOnly(t, env, r)
			}
			// One write at a time keeps the migration well behind the
			// writes below; with no rate cap, each chunk's list is sent
			// while the chunk before it is written, as what follows
			// counts on (under a cap it waits for the chunk's writes).
			m, requests := framework.NewMigrator(t, cfg, migrator.Options{ChunkSize: 100, Workers: 1})

			// Lists go by namespace, then name, 100 objects a chunk: the
			// first namespace's obj-00400 opens the second chunk and the
			// fourth namespace's objects come last (from the eighth). Once
			// the first chunk is saved, another writer updates obj-00400,
			// whose write svm then finds taken (409); once the fifth is, it
			// updates some of the fourth namespace's objects and deletes
			// others.
			updated, deleted := map[string]bool{nsA + "/obj-00400": true}, map[string]bool{}
			widgets := env.Dynamic.Resource(r.GVR("v1"))
			update := func(ctx context.Context, ns, name string) error {
				patch := fmt.Appendf(nil, `{"spec":{"updatedBy":"writer-%s"}}`, name)
				_, err := widgets.Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
				return err
			}
			ctx := framework.Context(t, 5*time.Minute)
			res, err := m.Run(ctx, migrator.Request{
				Resource: r.GVR("v1"),
				OnChunk: func(ctx context.Context, s migrator.State) error {
					switch s.Progress.Listed {
					case 100:
						if err := update(ctx, nsA, "obj-00400"); err != nil {
							return err
						}
						if tc.compact {
							env.CompactEtcd(t)
						}
					case 500:
						for i := 3; i < n; i += 4 * 5 { // every fifth object of the fourth namespace
							name := fmt.Sprintf("obj-%05d", i)
							if len(updated) <= len(deleted)+1 {
								if err := update(ctx, nsD, name); err != nil {
									return err
								}
								updated[nsD+"/"+name] = true
							} else {
								if err := widgets.Namespace(nsD).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
									return err
								}
								deleted[nsD+"/"+name] = true
							}
						}
					}
					return nil
				},
			})
			if err != nil {
				t.Fatalf("migrate: %v", err)
			}
			env.ExpectStored(t, r.EtcdPrefix(), inV2(r, n-len(deleted)))
			framework.ExpectWritesKept(t, before, env.TakeSnapshot(t, r.GVR("v1")), updated, deleted)

			// obj-00400 always costs a write: it starts the watch. The
			// others in the fourth namespace cost none when the watch runs.
			touched := len(updated) + len(deleted)
			others := touched - 1
			wantPatches, wantNoWrite := n, 0
			if tc.watch {
				wantPatches, wantNoWrite = n-others, others
			}
			if got := requests.Count("PATCH"); got != wantPatches {
				t.Errorf("%d patches, want %d: %d objects were written or deleted by others", got, wantPatches, touched)
			}
			p := res.Progress
			if p.Migrated() != int64(n-touched) || p.Skipped() != int64(touched) || p.SkippedWithoutWrite != int64(wantNoWrite) {
				t.Errorf("progress %+v: want %d rewritten, %d skipped, %d of them without a write", p, n-touched, touched, wantNoWrite)
			}
		})
	}
}

// listAndPatchOnly returns a config for a user of the test's own who may
// list and patch r, and nothing else: the least a migration needs.
func listAndPatchOnly(t *testing.T, env *framework.Env, r framework.Resource) *rest.Config {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	name := framework.TestName(t) + "-list-patch"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{r.Group}, Resources: []string{r.Plural}, Verbs: []string{"list", "patch"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	if _, err := env.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name}
	// RBAC takes a moment to see a new binding.
	widgets := metadata.NewForConfigOrDie(cfg).Resource(r.GVR("v1"))
	if !framework.WaitFor(ctx, 30*time.Second, func() bool {
		_, err := widgets.List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil
	}) {
		t.Fatalf("the list-and-patch user cannot list %s", r.Plural)
	}
	if w, err := widgets.Watch(ctx, metav1.ListOptions{}); err == nil {
		w.Stop()
		t.Fatalf("the list-and-patch user may watch %s; the test would prove nothing", r.Plural)
	}
	return cfg
}
