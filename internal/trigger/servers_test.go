package trigger

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestEncodingOfServers(t *testing.T) {
	const old, new = "oldhash", "newhash"
	own := func(server, hash string) ServerView { return ServerView{Server: server, Own: true, Hash: hash} }
	tests := []struct {
		name  string
		live  int
		views []ServerView
		want  *Encoding
		// say are what Disagreement must name.
		say []string
	}{
		{
			name: "every server read agrees", live: 2,
			views: []ServerView{own("a", new), own("b", new)},
			want:  &Encoding{Common: new, Reported: []string{new}},
		},
		{
			name: "a rolling upgrade half done: no common version, both kept", live: 2,
			views: []ServerView{own("a", old), own("b", new)},
			want:  &Encoding{Reported: []string{new, old}},
			say:   []string{"storage version hash oldhash on a", "storage version hash newhash on b"},
		},
		{
			name: "a server whose lease is live but which was not read holds agreement back", live: 2,
			views: []ServerView{own("a", new), {Server: "b", Own: true, Err: "connection refused"}},
			want:  &Encoding{Reported: []string{new}},
			say:   []string{"2 API servers hold live identity leases, 1 were read", "b: connection refused", "--apiserver-endpoints"},
		},
		{
			name: "a load balancer's answer does not count as a server of its own", live: 2,
			views: []ServerView{own("a", new), {Server: "lb", Hash: new}},
			want:  &Encoding{Reported: []string{new}},
			say:   []string{"lb may be a load balancer's address"},
		},
		{
			name: "a load balancer's answer still counts as a disagreement", live: 2,
			views: []ServerView{own("a", new), own("b", new), {Server: "lb", Hash: old}},
			want:  &Encoding{Reported: []string{new, old}},
			say:   []string{"oldhash on lb"},
		},
		{
			name: "a server that does not serve the resource writes none of it", live: 2,
			views: []ServerView{own("a", new), own("b", "")},
			want:  &Encoding{Common: new, Reported: []string{new}},
		},
		{
			name: "more servers read than leases live (one stopped a while ago)", live: 1,
			views: []ServerView{own("a", new), own("b", new)},
			want:  &Encoding{Common: new, Reported: []string{new}},
		},
		{
			name: "no server serves it", live: 2,
			views: []ServerView{own("a", ""), own("b", "")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EncodingOfServers(tt.live, tt.views)
			if got != nil {
				for _, s := range tt.say {
					if !strings.Contains(got.Disagreement, s) {
						t.Errorf("Disagreement %q does not say %q", got.Disagreement, s)
					}
				}
				if (got.Common == "") != (got.Disagreement != "") {
					t.Errorf("Disagreement %q with common hash %q: one of them must be empty", got.Disagreement, got.Common)
				}
				got.Disagreement = ""
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("EncodingOfServers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDisagreementFitsItsField(t *testing.T) {
	views := make([]ServerView, 0, 200)
	for i := range 200 {
		views = append(views, ServerView{Server: strings.Repeat("é", 20), Own: true, Hash: string(rune('a' + i%2))})
	}
	e := EncodingOfServers(200, views)
	if len(e.Disagreement) > maxDisagreement || !strings.HasSuffix(e.Disagreement, "…") {
		t.Errorf("Disagreement of %d bytes, ends %q: want at most %d, cut", len(e.Disagreement), e.Disagreement[len(e.Disagreement)-10:], maxDisagreement)
	}
}

// TestDecideOnServersViews follows a built-in resource through a rolling
// upgrade seen only through each server's discovery: recorded as migrated
// to the old version, it is not recorded as migrated to the new one while
// a server still stores the old, and is migrated once they all agree.
func TestDecideOnServersViews(t *testing.T) {
	const old, new = "oldhash", "newhash"
	st := state(t0.Add(-time.Hour), old, old)
	halfway := EncodingOfServers(2, []ServerView{{Server: "a", Own: true, Hash: old}, {Server: "b", Own: true, Hash: new}})

	d := Decide(Input{Now: t0, Observed: ptr(new), State: st, Encoding: halfway})
	if d.CreateMigrationFor != nil || d.Status == nil {
		t.Fatalf("servers disagree: migration %v, status %v; want no migration, a status", d.CreateMigrationFor, d.Status)
	}
	if got := d.Status; got.CurrentStorageVersionHash != unknown || !cmp.Equal(got.PersistedStorageVersionHashes, []string{old, new}) ||
		!strings.Contains(got.ServersDisagree, "newhash on b") {
		t.Fatalf("servers disagree: current %q, persisted %v, serversDisagree %q; want Unknown, both hashes, b named",
			got.CurrentStorageVersionHash, got.PersistedStorageVersionHashes, got.ServersDisagree)
	}

	st.Status = *d.Status
	agreed := EncodingOfServers(1, []ServerView{{Server: "b", Own: true, Hash: new}})
	d = Decide(Input{Now: t0.Add(3 * time.Minute), Observed: ptr(new), State: st, Encoding: agreed})
	if d.CreateMigrationFor == nil || *d.CreateMigrationFor != new || !d.RecordRevision {
		t.Fatalf("servers agree: migration %v, record revision %v; want one to %s, recording the revision", d.CreateMigrationFor, d.RecordRevision, new)
	}
	if got := d.Status; got.CurrentStorageVersionHash != new || got.ServersDisagree != "" || !cmp.Equal(got.PersistedStorageVersionHashes, []string{old, new}) {
		t.Errorf("servers agree: current %q, persisted %v, serversDisagree %q; want %s, both hashes until migrated, no disagreement",
			got.CurrentStorageVersionHash, got.PersistedStorageVersionHashes, got.ServersDisagree, new)
	}
}

func TestServersBehind(t *testing.T) {
	tests := []struct {
		name  string
		views []ServerView
		want  string // what the message names; "" for none
	}{
		{"every server took it up", []ServerView{{Server: "a", Own: true, Hash: "B"}, {Server: "b", Own: true, Hash: "B"}}, ""},
		{"one still reports the storage before", []ServerView{{Server: "a", Own: true, Hash: "B"}, {Server: "b", Own: true, Hash: "A"}}, "b reports storage version hash A"},
		{"a server not read is left to the settle delay", []ServerView{{Server: "a", Own: true, Hash: "B"}, {Server: "b", Own: true, Err: "timeout"}}, ""},
		{"a load balancer's answer may be any server's", []ServerView{{Server: "a", Own: true, Hash: "B"}, {Server: "lb", Hash: "A"}}, ""},
		{"a server that does not serve it yet writes none of it", []ServerView{{Server: "a", Own: true, Hash: "B"}, {Server: "b", Own: true}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ServersBehind("B", tt.views)
			if (got == "") != (tt.want == "") || !strings.Contains(got, tt.want) {
				t.Errorf("ServersBehind = %q, want one naming %q", got, tt.want)
			}
		})
	}
}
