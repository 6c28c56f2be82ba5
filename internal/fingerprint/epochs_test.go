package fingerprint

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// step is one thing svm does with a CRD's fingerprints: read the CRD
// (uid u1 unless another is given) at a generation with a storage
// version, learn what it recorded, or restart (forget everything).
type step struct {
	read    int64
	storage string
	uid     string
	learn   string
	restart bool
}

func read(generation int64, storage string) step { return step{read: generation, storage: storage} }
func learn(recorded string) step                 { return step{learn: recorded} }

var restart = step{restart: true}

// run takes the steps on e, and returns the fingerprint of every read.
func run(e *Epochs, steps []step) []string {
	var reads []string
	for _, s := range steps {
		switch {
		case s.restart:
			e = NewEpochs()
		case s.learn != "":
			e.Learn(s.learn)
		default:
			uid := s.uid
			if uid == "" {
				uid = "u1"
			}
			reads = append(reads, e.Of(crd(uid, s.read, s.storage), nil).Value)
		}
	}
	return reads
}

func TestEpochs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
		// want are the fingerprints of the reads; first is what the last
		// read is compared with (the first read's when empty), and same
		// whether it is the same storage.
		want  []string
		first string
		same  bool
	}{
		{
			name:  "generations one after another, same storage version",
			steps: []step{read(5, "v2"), read(6, "v2"), read(7, "v2"), read(8, "v2")},
			want:  []string{"crd=u1/5/v2", "crd=u1/5..6/v2", "crd=u1/5..7/v2", "crd=u1/5..8/v2"}, same: true,
		},
		{
			name:  "the same generation read again",
			steps: []step{read(5, "v2"), read(5, "v2")},
			want:  []string{"crd=u1/5/v2", "crd=u1/5/v2"}, same: true,
		},
		{
			name:  "one generation apart: one spec change cannot flip and flip back",
			steps: []step{read(5, "v2"), read(6, "v2")},
			want:  []string{"crd=u1/5/v2", "crd=u1/5..6/v2"}, same: true,
		},
		{
			name:  "two generations apart: 6 was never seen and may have stored v1",
			steps: []step{read(5, "v2"), read(7, "v2")},
			want:  []string{"crd=u1/5/v2", "crd=u1/7/v2"},
		},
		{
			name:  "three generations apart, then one after another again: the new epoch holds",
			steps: []step{read(5, "v2"), read(8, "v2"), read(9, "v2")},
			want:  []string{"crd=u1/5/v2", "crd=u1/8/v2", "crd=u1/8..9/v2"},
		},
		{
			name:  "a flip and a flip back, each seen",
			steps: []step{read(5, "v2"), read(6, "v1"), read(7, "v2")},
			want:  []string{"crd=u1/5/v2", "crd=u1/6/v1", "crd=u1/7/v2"},
		},
		{
			name:  "restarted, taught the StorageState's fingerprint: the next generation continues its epoch",
			steps: []step{restart, learn("crd=u1/3..5/v2"), read(6, "v2")},
			want:  []string{"crd=u1/3..6/v2"}, first: "crd=u1/3..5/v2", same: true,
		},
		{
			name:  "restarted, taught the StorageState's: a migration's from the same epoch is the same storage",
			steps: []step{restart, learn("crd=u1/3..5/v2"), read(6, "v2")},
			want:  []string{"crd=u1/3..6/v2"}, first: "crd=u1/4/v2", same: true,
		},
		{
			name:  "restarted and taught nothing: only the next generation is known to join",
			steps: []step{restart, read(6, "v2"), read(7, "v2")},
			want:  []string{"crd=u1/6/v2", "crd=u1/6..7/v2"}, first: "crd=u1/3..4/v2",
		},
		{
			name:  "restarted, taught the StorageState's, two generations on",
			steps: []step{restart, learn("crd=u1/3..5/v2"), read(7, "v2")},
			want:  []string{"crd=u1/7/v2"}, first: "crd=u1/3..5/v2",
		},
		{
			name:  "restarted, taught a fingerprint of the form before epochs: it says no more than its own generation",
			steps: []step{restart, learn("crd=u1/5/v2"), read(6, "v2")},
			want:  []string{"crd=u1/5..6/v2"}, first: "crd=u1/5/v2", same: true,
		},
		{
			name:  "a fingerprint of the form before epochs, two generations on",
			steps: []step{restart, learn("crd=u1/5/v2"), read(7, "v2")},
			want:  []string{"crd=u1/7/v2"}, first: "crd=u1/5/v2",
		},
		{
			name:  "the form before the UID teaches nothing",
			steps: []step{restart, learn("crd=5/v2"), read(6, "v2")},
			want:  []string{"crd=u1/6/v2"}, first: "crd=5/v2",
		},
		{
			name:  "taught records that join: the earliest epoch",
			steps: []step{read(6, "v2"), learn("crd=u1/4..5/v2"), learn("crd=u1/2..4/v2"), read(7, "v2")},
			want:  []string{"crd=u1/6/v2", "crd=u1/2..7/v2"}, first: "crd=u1/2/v2", same: true,
		},
		{
			name:  "an older record of another storage version leaves the run alone",
			steps: []step{read(6, "v2"), learn("crd=u1/3..4/v1"), read(7, "v2")},
			want:  []string{"crd=u1/6/v2", "crd=u1/6..7/v2"}, same: true,
		},
		{
			name:  "a newer record that does not join begins the run anew",
			steps: []step{read(3, "v2"), learn("crd=u1/6..8/v2"), read(9, "v2")},
			want:  []string{"crd=u1/3/v2", "crd=u1/6..9/v2"},
		},
		{
			name:  "a lagging read of an older generation leaves the run alone",
			steps: []step{read(5, "v2"), read(6, "v2"), read(3, "v1"), read(7, "v2")},
			want:  []string{"crd=u1/5/v2", "crd=u1/5..6/v2", "crd=u1/3/v1", "crd=u1/5..7/v2"}, same: true,
		},
		{
			name:  "a lagging read within the run has its epoch",
			steps: []step{read(5, "v2"), read(6, "v2"), read(7, "v2"), read(6, "v2")},
			want:  []string{"crd=u1/5/v2", "crd=u1/5..6/v2", "crd=u1/5..7/v2", "crd=u1/5..6/v2"}, same: true,
		},
		{
			name:  "another CRD does not mix in",
			steps: []step{read(5, "v2"), {read: 6, storage: "v2", uid: "u2"}, read(6, "v2")},
			want:  []string{"crd=u1/5/v2", "crd=u2/6/v2", "crd=u1/5..6/v2"}, same: true,
		},
		{
			name:  "the CRD deleted and created again",
			steps: []step{read(5, "v2"), {read: 6, storage: "v2", uid: "u2"}},
			want:  []string{"crd=u1/5/v2", "crd=u2/6/v2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := run(NewEpochs(), tc.steps)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("fingerprints read (-want +got):\n%s", diff)
			}
			first := tc.first
			if first == "" {
				first = got[0]
			}
			if same := SameStorage(first, got[len(got)-1]); same != tc.same {
				t.Errorf("SameStorage(%q, %q) = %v, want %v", first, got[len(got)-1], same, tc.same)
			}
		})
	}
}

// TestNilEpochs: without memory, each read says only itself, and the rule
// still tells one spec change from more.
func TestNilEpochs(t *testing.T) {
	got := run(nil, []step{read(5, "v2"), read(6, "v2"), read(8, "v2")})
	if diff := cmp.Diff([]string{"crd=u1/5/v2", "crd=u1/6/v2", "crd=u1/8/v2"}, got); diff != "" {
		t.Fatalf("fingerprints read (-want +got):\n%s", diff)
	}
	if !SameStorage(got[0], got[1]) || SameStorage(got[1], got[2]) {
		t.Errorf("SameStorage: 5 to 6 %v (want true), 6 to 8 %v (want false)", SameStorage(got[0], got[1]), SameStorage(got[1], got[2]))
	}
}
