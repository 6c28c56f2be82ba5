package followup

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var mark = Mark{Value: "svm-test", TargetKey: "example.com/target"}

type migration = migrationv1alpha1.StorageVersionMigration

// marked is a migration carrying mark, made for target; outcome is "",
// "ok" or "failed", ending a minute after created.
func marked(name, target string, created time.Time, outcome string) migration {
	m := unmarked(name, created, outcome)
	m.Labels = map[string]string{CreatedByLabel: mark.Value}
	m.Annotations = map[string]string{mark.TargetKey: target}
	return m
}

func unmarked(name string, created time.Time, outcome string) migration {
	m := migration{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}}
	typ := map[string]migrationv1alpha1.MigrationConditionType{"ok": migrationv1alpha1.MigrationSucceeded, "failed": migrationv1alpha1.MigrationFailed}[outcome]
	if typ != "" {
		m.Status.Conditions = []migrationv1alpha1.MigrationCondition{{Type: typ, Status: corev1.ConditionTrue, LastUpdateTime: metav1.NewTime(created.Add(time.Minute))}}
	}
	return m
}

func deleting(m migration) migration {
	m.DeletionTimestamp = &metav1.Time{Time: t0}
	return m
}

// endedAt is when m's condition was set.
func endedAt(m *migration) time.Time {
	if len(m.Status.Conditions) > 0 {
		return m.Status.Conditions[0].LastUpdateTime.Time
	}
	return m.CreationTimestamp.Time
}

func names(ms []migration) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func TestMark(t *testing.T) {
	other := marked("other", "A", t0, "")
	other.Labels[CreatedByLabel] = "svm-other"
	ms := []migration{
		marked("a-running", "A", t0, ""),
		marked("b-running", "B", t0, ""),
		marked("a-done", "A", t0, "ok"),
		marked("b-failed", "B", t0, "failed"),
		deleting(marked("b-deleting", "B", t0, "")),
		unmarked("users", t0, ""),
		other,
	}
	if !mark.Owns(&ms[0]) || mark.Owns(&ms[5]) || mark.Owns(&other) {
		t.Error("Owns tells the marked migrations from a user's and another mark's wrongly")
	}
	if got := mark.Target(&ms[1]); got != "B" {
		t.Errorf("Target = %q, want B", got)
	}
	if diff := cmp.Diff([]string{"b-running", "b-failed", "b-deleting"}, names(mark.For(ms, "B"))); diff != "" {
		t.Errorf("For(B) (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		keep string
		want []string
	}{
		{"", []string{"a-running", "b-running"}},
		{"A", []string{"b-running"}},
		{"B", []string{"a-running"}},
		{"C", []string{"a-running", "b-running"}},
	} {
		if diff := cmp.Diff(tc.want, mark.Unfinished(ms, tc.keep)); diff != "" {
			t.Errorf("Unfinished(keep %q) (-want +got):\n%s", tc.keep, diff)
		}
	}
}

func TestFirstActive(t *testing.T) {
	for _, tc := range []struct {
		name string
		ms   []migration
		want string // "" for none
	}{
		{"none", nil, ""},
		{"finished ones do not count", []migration{unmarked("ok", t0, "ok"), unmarked("failed", t0, "failed")}, ""},
		{"one being deleted does not count", []migration{deleting(unmarked("going", t0, ""))}, ""},
		{"anyone's counts, the first wins", []migration{unmarked("done", t0, "ok"), unmarked("users", t0, ""), marked("svms", "A", t0, "")}, "users"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if m := FirstActive(tc.ms); m != nil {
				got = m.Name
			}
			if got != tc.want {
				t.Errorf("FirstActive = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{1, time.Minute},
		{2, 2 * time.Minute},
		{3, 4 * time.Minute},
		{4, 8 * time.Minute},
		{5, 10 * time.Minute},
		{60, 10 * time.Minute},
	} {
		if got := Backoff(time.Minute, 10*time.Minute, tc.failures); got != tc.want {
			t.Errorf("backoff after %d failures = %s, want %s", tc.failures, got, tc.want)
		}
	}
}

func TestNextRetry(t *testing.T) {
	for _, tc := range []struct {
		name string
		ms   []migration
		now  time.Time
		want Retry
		wait time.Duration
	}{{
		name: "nothing failed: no wait",
		ms:   []migration{marked("ok", "A", t0, "ok"), marked("running", "A", t0, "")},
		now:  t0,
	}, {
		name: "one failure: the base delay after it ended",
		ms:   []migration{marked("f1", "A", t0, "failed")},
		now:  t0.Add(90 * time.Second),
		want: Retry{Failures: 1, Due: t0.Add(2 * time.Minute)},
		wait: 30 * time.Second,
	}, {
		name: "the delay doubles per failure and runs from the last to end, whatever the order",
		ms:   []migration{marked("f3", "A", t0.Add(2*time.Minute), "failed"), marked("f1", "A", t0, "failed"), marked("f2", "A", t0.Add(time.Minute), "failed")},
		now:  t0.Add(4 * time.Minute),
		want: Retry{Failures: 3, Due: t0.Add(7 * time.Minute)},
		wait: 3 * time.Minute,
	}, {
		name: "due: no wait",
		ms:   []migration{marked("f1", "A", t0, "failed")},
		now:  t0.Add(2 * time.Minute),
		want: Retry{Failures: 1, Due: t0.Add(2 * time.Minute)},
	}, {
		name: "capped",
		ms:   []migration{marked("f1", "A", t0, "failed"), marked("f2", "A", t0, "failed"), marked("f3", "A", t0, "failed"), marked("f4", "A", t0, "failed"), marked("f5", "A", t0, "failed")},
		now:  t0.Add(time.Minute),
		want: Retry{Failures: 5, Due: t0.Add(time.Minute + 10*time.Minute)},
		wait: 10 * time.Minute,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := NextRetry(tc.ms, endedAt, time.Minute, 10*time.Minute)
			if r.Failures != tc.want.Failures || !r.Due.Equal(tc.want.Due) {
				t.Errorf("NextRetry = %+v, want %+v", r, tc.want)
			}
			if got := r.Wait(tc.now); got != tc.wait {
				t.Errorf("Wait = %s, want %s", got, tc.wait)
			}
		})
	}
}
