package history

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/followup"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type migration = migrationv1alpha1.StorageVersionMigration

// m is a migration of widgets named name, made by the trigger, created at
// minute min and, for outcome "ok" or "failed", ended a minute later; ""
// leaves it running. Options change it further.
func m(name string, minute int, outcome string, opts ...func(*migration)) migration {
	created := t0.Add(time.Duration(minute) * time.Minute)
	x := migration{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created),
		Labels: map[string]string{followup.CreatedByLabel: followup.TriggerValue}}}
	x.Spec.Resource = migrationv1alpha1.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	x.Status.StorageVersionHash = "h1"
	x.Status.StartTime = &metav1.Time{Time: created}
	typ := map[string]migrationv1alpha1.MigrationConditionType{"ok": migrationv1alpha1.MigrationSucceeded, "failed": migrationv1alpha1.MigrationFailed}[outcome]
	if typ != "" {
		end := metav1.NewTime(created.Add(time.Minute))
		x.Status.CompletionTime = &end
		x.Status.Conditions = []migrationv1alpha1.MigrationCondition{{Type: typ, Status: corev1.ConditionTrue, LastUpdateTime: end}}
	}
	for _, o := range opts {
		o(&x)
	}
	return x
}

func by(creator string) func(*migration) {
	return func(x *migration) { x.Labels = map[string]string{followup.CreatedByLabel: creator} }
}

// byUser makes x a user's migration: no created-by label.
func byUser(x *migration) { x.Labels = nil }

func hash(h string) func(*migration) { return func(x *migration) { x.Status.StorageVersionHash = h } }

func of(group, resource string) func(*migration) {
	return func(x *migration) { x.Spec.Resource.Group, x.Spec.Resource.Resource = group, resource }
}

func inTreeRun(x *migration) { x.Status.InTreeMigration = "it-" + x.Name }

func entriesLeft(x *migration) {
	x.Status.Progress.ManagedFieldsLeft = &migrationv1alpha1.ManagedFieldsLeft{Denied: 1}
}

func writtenSinceChange(x *migration) { x.Status.Progress.WrittenSinceChange = 5 }

func deleting(x *migration) { x.DeletionTimestamp = &metav1.Time{Time: t0} }

// endedAt sets when x ended, in seconds after t0 (to test the second's
// precision).
func endedAt(sec int) func(*migration) {
	return func(x *migration) {
		x.Status.CompletionTime = &metav1.Time{Time: t0.Add(time.Duration(sec) * time.Second)}
	}
}

// noCompletion drops status.completionTime: the condition's time tells.
func noCompletion(x *migration) { x.Status.CompletionTime = nil }

var defaults = Policy{Succeeded: 3, Failed: 1, Row: 7}

func TestExpired(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Policy
		ms   []migration
		want []string // oldest first within a resource
	}{{
		name: "nothing finished: nothing deleted",
		p:    Policy{Row: 1},
		ms:   []migration{m("a", 0, ""), m("b", 1, "")},
	}, {
		name: "the newest three successes and the newest failure stay, after a success",
		p:    defaults,
		ms: []migration{
			m("s1", 0, "ok"), m("f1", 2, "failed"), m("s2", 4, "ok"), m("f2", 6, "failed"), m("s3", 8, "ok"),
			m("s4", 10, "ok"), m("f3", 12, "failed"), m("s5", 14, "ok"), m("running", 16, ""),
		},
		want: []string{"s1", "f1", "s2", "f2"},
	}, {
		name: "resources apart: each keeps its own, whatever the version",
		p:    Policy{Succeeded: 1, Failed: 0, Row: 1},
		ms: []migration{
			m("w1", 0, "ok"), m("w2", 2, "ok"),
			m("g1", 1, "ok", of("other.io", "gadgets")), m("g2", 3, "ok", of("other.io", "gadgets")),
			m("w3", 4, "ok", func(x *migration) { x.Spec.Resource.Version = "v2" }),
			m("s1", 0, "ok", of("", "secrets")),
		},
		want: []string{"w1", "w2", "g1"},
	}, {
		name: "users' migrations: never deleted, but counted among the newest",
		p:    Policy{Succeeded: 1, Failed: 1, Row: 1},
		ms: []migration{
			m("u-old", 0, "ok", byUser), m("u-failed", 1, "failed", byUser), m("s1", 2, "ok"), m("f1", 3, "failed"),
			m("s2", 4, "ok"), m("u-new", 6, "ok", byUser),
		},
		want: []string{"s1", "s2"},
	}, {
		name: "being deleted or running: never counted nor deleted",
		p:    Policy{Succeeded: 1, Row: 1},
		ms:   []migration{m("old", 0, "ok", deleting), m("s1", 2, "ok"), m("s2", 4, "ok"), m("run", 1, "")},
		want: []string{"s1"},
	}, {
		name: "failures since the last success stay, up to the row per creator, beyond the limit",
		p:    Policy{Succeeded: 1, Failed: 1, Row: 2},
		ms: []migration{
			m("f0", 0, "failed", by("svm-trigger")), m("s1", 2, "ok"),
			m("t1", 4, "failed", by("svm-trigger")), m("e1", 5, "failed", by("svm-encryption")),
			m("t2", 6, "failed", by("svm-trigger")), m("e2", 7, "failed", by("svm-encryption")),
			m("t3", 8, "failed", by("svm-trigger")), m("u1", 9, "failed", byUser),
		},
		want: []string{"f0", "t1"},
	}, {
		name: "failed 0: only the row is kept",
		p:    Policy{Succeeded: 3, Failed: 0, Row: 7},
		ms:   []migration{m("f1", 0, "failed"), m("f2", 2, "failed"), m("s1", 4, "ok"), m("f3", 6, "failed")},
		want: []string{"f1", "f2"},
	}, {
		name: "succeeded 0: the newest success per hash stays",
		p:    Policy{Succeeded: 0, Failed: 0, Row: 7},
		ms: []migration{
			m("a1", 0, "ok", hash("hA")), m("b1", 2, "ok", hash("hB")), m("a2", 4, "ok", hash("hA")),
			m("b2", 6, "ok", hash("hB")), m("a3", 8, "ok", hash("hA")),
		},
		want: []string{"a1", "b1", "a2"},
	}, {
		name: "the newest success that rewrote every object stays for the re-encryption",
		p:    Policy{Succeeded: 1, Row: 7},
		ms:   []migration{m("enc", 0, "ok", by("svm-encryption")), m("x", 2, "ok", writtenSinceChange), m("y", 4, "ok", writtenSinceChange)},
		want: []string{"x"},
	}, {
		name: "held successes since the last clean one stay, up to the row",
		p:    Policy{Succeeded: 1, Failed: 0, Row: 2},
		ms: []migration{
			m("clean0", 0, "ok"), m("clean", 2, "ok"),
			m("h1", 4, "ok", entriesLeft), m("f1", 5, "failed"), m("h2", 6, "ok", entriesLeft),
			m("h3", 8, "ok", entriesLeft),
		},
		want: []string{"clean0", "h1"},
	}, {
		name: "the in-tree migrator's last failure stays while no in-tree success started after it",
		p:    Policy{Succeeded: 1, Failed: 0, Row: 1},
		ms: []migration{
			m("itf", 0, "failed", inTreeRun), m("s1", 2, "ok"), m("s2", 4, "ok"),
		},
		want: []string{"s1"},
	}, {
		name: "an in-tree success that started later lets an in-tree failure go, and stays",
		p:    Policy{Succeeded: 1, Failed: 0, Row: 1},
		ms: []migration{
			m("itf", 0, "failed", inTreeRun), m("its", 2, "ok", inTreeRun), m("s1", 4, "ok"), m("s2", 6, "ok"),
		},
		want: []string{"itf", "s1"},
	}, {
		name: "an in-tree success that started in the second the failure ended does not count as after it",
		p:    Policy{Succeeded: 1, Failed: 0, Row: 1},
		ms: []migration{
			m("itf", 0, "failed", inTreeRun, endedAt(60)),
			m("its", 1, "ok", inTreeRun, func(x *migration) {
				x.Status.StartTime = &metav1.Time{Time: t0.Add(60*time.Second + 500*time.Millisecond)}
			}),
			m("s1", 4, "ok"),
		},
		want: nil,
	}, {
		name: "order: completion time, then creation, then name; the condition's time without one",
		p:    Policy{Succeeded: 2, Row: 1},
		ms: []migration{
			m("late-created", 9, "ok", endedAt(100)), m("early-created", 1, "ok", endedAt(100)),
			m("by-condition", 0, "ok", noCompletion), // ended at minute 1
			m("b", 1, "ok", endedAt(50)), m("a", 1, "ok", endedAt(50)),
		},
		want: []string{"a", "b", "by-condition"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, x := range Expired(tc.p, tc.ms) {
				got = append(got, x.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Expired (-want +got):\n%s", diff)
			}
			// What is kept, looked at again, keeps: the controller's own
			// deletions ask for nothing more.
			left := slices.DeleteFunc(slices.Clone(tc.ms), func(x migration) bool { return slices.Contains(got, x.Name) })
			if again := Expired(tc.p, left); len(again) > 0 {
				t.Errorf("Expired on what it kept deletes %s more", again[0].Name)
			}
		})
	}
}

func TestRowFor(t *testing.T) {
	for _, tc := range []struct {
		base, max time.Duration
		want      int
	}{
		{time.Minute, time.Hour, 7},
		{2 * time.Second, time.Hour, 12},
		{time.Hour, time.Hour, 1},
		{2 * time.Hour, time.Hour, 1},
		{0, time.Hour, 1},
	} {
		if got := RowFor(tc.base, tc.max); got != tc.want {
			t.Errorf("RowFor(%s, %s) = %d, want %d", tc.base, tc.max, got, tc.want)
		}
		if tc.base > 0 && followup.Backoff(tc.base, tc.max, tc.want) != tc.max {
			t.Errorf("after %d failures the delay %s is not yet the cap", tc.want, followup.Backoff(tc.base, tc.max, tc.want))
		}
	}
}
