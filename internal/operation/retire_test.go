package operation

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestQuietWindowAndDecideUnserve(t *testing.T) {
	start := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	a := func(requests, open int64) ServerUsage {
		return ServerUsage{Endpoint: "https://a", Since: start, Requests: requests, Open: open}
	}
	b := func(requests int64, since time.Time) ServerUsage {
		return ServerUsage{Endpoint: "https://b", Since: since, Requests: requests}
	}
	tests := []struct {
		name          string
		before, after []ServerUsage
		wantSeen      []int64
		want          unserveVerdict
	}{
		{"nobody asked", []ServerUsage{a(10, 0), b(3, start)}, []ServerUsage{a(10, 0), b(3, start)}, []int64{0, 0}, unserveQuiet},
		{"one server answered requests", []ServerUsage{a(10, 0), b(3, start)}, []ServerUsage{a(10, 0), b(5, start)}, []int64{0, 2}, unserveBusy},
		{"a watch is open", []ServerUsage{a(10, 1)}, []ServerUsage{a(10, 1)}, []int64{0}, unserveBusy},
		{"a server restarted", []ServerUsage{a(10, 0), b(3, start)}, []ServerUsage{a(10, 0), b(0, start.Add(time.Minute))}, []int64{0, 0}, unserveUnknown},
		{"a server unread at the start", []ServerUsage{a(10, 0), {Endpoint: "https://b", Error: "forbidden"}}, []ServerUsage{a(10, 0), b(3, start)}, []int64{0, 0}, unserveUnknown},
		{"busy beats unknown", []ServerUsage{a(10, 0)}, []ServerUsage{a(11, 0), b(3, start)}, []int64{1, 0}, unserveBusy},
		{"no server at all", nil, nil, nil, unserveUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := quietWindow(tt.before, tt.after)
			var seen []int64
			for _, u := range got {
				seen = append(seen, u.SeenInWindow)
			}
			if diff := cmp.Diff(tt.wantSeen, seen); diff != "" {
				t.Errorf("seen in window (-want +got):\n%s", diff)
			}
			if v := decideUnserve(got); v != tt.want {
				t.Errorf("decideUnserve = %d, want %d (usage %+v)", v, tt.want, got)
			}
		})
	}
}

func TestUnreachedServers(t *testing.T) {
	if u := unreachedServers(1, 1); u != nil {
		t.Errorf("one server, one endpoint: %+v", u)
	}
	if u := unreachedServers(2, 3); u != nil {
		t.Errorf("two servers, three endpoints (one read twice under two URLs): %+v", u)
	}
	u := unreachedServers(3, 1)
	if u == nil || u.Error == "" {
		t.Fatalf("three servers, one endpoint: %+v, want an entry of unknown usage", u)
	}
	before, after := []ServerUsage{{Endpoint: "https://a"}, *u}, []ServerUsage{{Endpoint: "https://a"}, *u}
	if v := decideUnserve(quietWindow(before, after)); v != unserveUnknown {
		t.Errorf("with servers unread: %d, want unknown", v)
	}
}
