package storagestate

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/metrics"
	"github.com/svm-project/svm/internal/trigger"
)

func TestStatusTransitions(t *testing.T) {
	const unknown = migrationv1alpha1.UnknownStorageVersionHash
	status := func(current string, persisted ...string) *migrationv1alpha1.StorageStateStatus {
		return &migrationv1alpha1.StorageStateStatus{CurrentStorageVersionHash: current, PersistedStorageVersionHashes: persisted}
	}
	tests := []struct {
		name         string
		old, updated *migrationv1alpha1.StorageStateStatus
		want         []string // metric labels, in order
	}{
		{"heartbeat only", status("A", "A"), status("A", "A"), nil},
		{"heartbeat while a migration runs", status("A", unknown, "A"), status("A", unknown, "A"), nil},
		{"hash changed", status("A", "A"), status("B", "A", "B"), []string{metrics.TransitionStorageVersionChanged}},
		{"migrated after creation", status("A", unknown), status("A", "A"), []string{metrics.TransitionMigrated}},
		{"migrated after a change", status("B", "A", "B"), status("B", "B"), []string{metrics.TransitionMigrated}},
		{"migrated from a status never written", status("A"), status("A", "A"), []string{metrics.TransitionMigrated}},
		{"a CRD's stored version recorded", status("B", "B"), status("B", "B", "A"), nil},
		{"a state without a current hash yet", status("", unknown), status("A", unknown, "A"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, tr := range statusTransitions(tt.old, tt.updated) {
				got = append(got, tr.metric)
				if tr.note == "" || tr.reason == "" || tr.action == "" {
					t.Errorf("transition %+v lacks a reason, action or note", tr)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("transitions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStorageChangedTransition(t *testing.T) {
	status := func(current, fp string) *migrationv1alpha1.StorageStateStatus {
		return &migrationv1alpha1.StorageStateStatus{CurrentStorageVersionHash: current, PersistedStorageVersionHashes: []string{current}, StorageFingerprint: fp}
	}
	tests := []struct {
		name         string
		old, updated *migrationv1alpha1.StorageStateStatus
		want         bool
	}{
		{"a flip and a flip back: another generation", status("B", "crd=u/3/v2"), status("B", "crd=u/5/v2"), true},
		{"the CRD re-created", status("B", "crd=u/3/v2"), status("B", "crd=w/1/v2"), true},
		{"the same storage", status("B", "crd=u/3/v2"), status("B", "crd=u/3/v2"), false},
		{"a spec change seen, the storage version the same", status("B", "crd=u/3/v2"), status("B", "crd=u/3..4/v2"), false},
		{"spec changes seen one after another", status("B", "crd=u/2..5/v2"), status("B", "crd=u/2..9/v2"), false},
		{"generations unseen, the storage version the same", status("B", "crd=u/2..5/v2"), status("B", "crd=u/7/v2"), true},
		{"a fingerprint recorded for the first time", status("B", ""), status("B", "crd=u/3/v2"), false},
		{"the hash changed too: StorageVersionChanged says it", status("A", "crd=u/3/v1"), status("B", "crd=u/4/v2"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, ok := storageChangedTransition(tt.old, tt.updated)
			if ok != tt.want {
				t.Fatalf("storageChangedTransition = %+v, %v; want %v", tr, ok, tt.want)
			}
			if ok && (tr.reason != ReasonStorageChanged || tr.note == "") {
				t.Errorf("transition %+v: want reason %s and a note", tr, ReasonStorageChanged)
			}
		})
	}
}

// A wait for a CRD's change to settle is no retry: only the backoff after
// a failed migration says one failed, once per failure, however many
// rounds see it waiting.
func TestRetryEventOnlyAfterAFailure(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	gr := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	state := &migrationv1alpha1.StorageState{Status: migrationv1alpha1.StorageStateStatus{CurrentStorageVersionHash: "B"}}
	recorder := events.NewFakeRecorder(10)
	c := &Controller{Recorder: recorder, retries: map[schema.GroupResource]string{}}
	count := func() int {
		n := 0
		for {
			select {
			case ev := <-recorder.Events:
				if !strings.Contains(ev, ReasonRetryScheduled) {
					t.Errorf("event %q, want only %s", ev, ReasonRetryScheduled)
				}
				n++
			default:
				return n
			}
		}
	}
	c.noteRetry(gr, state, trigger.Decision{RequeueAfter: 2 * time.Minute}, now)
	c.noteRetry(gr, state, trigger.Decision{RequeueAfter: time.Minute}, now.Add(time.Minute))
	if n := count(); n != 0 {
		t.Fatalf("%d events while a CRD's change settles, want none", n)
	}
	// The first failure's backoff, seen by three rounds: one event.
	due := now.Add(3 * time.Minute)
	for _, at := range []time.Time{now.Add(2 * time.Minute), now.Add(150 * time.Second), now.Add(170 * time.Second)} {
		c.noteRetry(gr, state, trigger.Decision{RequeueAfter: due.Sub(at), Retry: true}, at)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d events over three rounds of one retry, want 1", n)
	}
	// A second failure: another retry, another event.
	c.noteRetry(gr, state, trigger.Decision{RequeueAfter: 2 * time.Minute, Retry: true}, due.Add(time.Minute))
	if n := count(); n != 1 {
		t.Fatalf("%d events for the second failure's retry, want 1", n)
	}
}
