package health

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

const lease = 15 * time.Second

func follower(holder string, observedAgo time.Duration) Leadership {
	return Leadership{Enabled: true, Identity: "me", Holder: holder, Observed: t0.Add(-observedAgo), LeaseDuration: lease}
}

func leader(renewedAgo time.Duration) Leadership {
	return Leadership{Enabled: true, Identity: "me", Leading: true, Holder: "me", Renewed: t0.Add(-renewedAgo), Observed: t0.Add(-renewedAgo), LeaseDuration: lease}
}

func TestReady(t *testing.T) {
	tests := []struct {
		name    string
		state   State
		wantErr string // "" when ready
	}{
		{
			name:  "without leader election, ready once caches are synced",
			state: State{Now: t0, CachesSynced: true},
		},
		{
			name:    "caches not synced",
			state:   State{Now: t0, Leadership: leader(time.Second)},
			wantErr: "caches not synced",
		},
		{
			name:  "the leader",
			state: State{Now: t0, CachesSynced: true, Leadership: leader(time.Second)},
		},
		{
			name:  "a follower that sees a valid lease held by another replica",
			state: State{Now: t0, CachesSynced: true, Leadership: follower("other", 5*time.Second)},
		},
		{
			name:    "a follower that has not read the lease yet",
			state:   State{Now: t0, CachesSynced: true, Leadership: Leadership{Enabled: true, Identity: "me"}},
			wantErr: "no lease holder seen",
		},
		{
			name:    "a follower that sees a released lease",
			state:   State{Now: t0, CachesSynced: true, Leadership: follower("", time.Second)},
			wantErr: "no lease holder seen",
		},
		{
			name:    "a follower that sees an expired lease",
			state:   State{Now: t0, CachesSynced: true, Leadership: follower("other", 20*time.Second)},
			wantErr: "lease of other expired 5s ago",
		},
		{
			name:    "a lease that expires exactly now is expired",
			state:   State{Now: t0, CachesSynced: true, Leadership: follower("other", lease)},
			wantErr: "expired",
		},
		{
			name:    "the lease acquired but the leader's work not started",
			state:   State{Now: t0, CachesSynced: true, Leadership: follower("me", time.Second)},
			wantErr: "leader not started yet",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectError(t, Ready(tt.state), tt.wantErr)
		})
	}
}

func TestLive(t *testing.T) {
	trigger := func(beatAgo time.Duration) Loop {
		return Loop{Name: "trigger", LastBeat: t0.Add(-beatAgo), StallAfter: StallAfter(10 * time.Minute)}
	}
	tests := []struct {
		name    string
		state   State
		wantErr string // "" when live
	}{
		{
			name:  "idle, without leader election",
			state: State{Now: t0},
		},
		{
			name:  "a leader that renews",
			state: State{Now: t0, Leadership: leader(2 * time.Second), Loops: []Loop{trigger(time.Minute)}},
		},
		{
			name:  "a follower is never blamed for the lease",
			state: State{Now: t0, Leadership: follower("other", time.Hour)},
		},
		{
			name:  "caches are not a liveness matter",
			state: State{Now: t0, CachesSynced: false},
		},
		{
			name:    "a leader that has not renewed for a lease duration",
			state:   State{Now: t0, Leadership: leader(16 * time.Second)},
			wantErr: "leading without renewing the lease for 16s (lease duration 15s)",
		},
		{
			name:    "a leader that never wrote the lease",
			state:   State{Now: t0, Leadership: Leadership{Enabled: true, Identity: "me", Leading: true, LeaseDuration: lease}},
			wantErr: "leading without having written the lease",
		},
		{
			name:  "without leader election nothing is renewed",
			state: State{Now: t0, Leadership: Leadership{Leading: true}},
		},
		{
			name:  "a trigger loop within three intervals",
			state: State{Now: t0, Loops: []Loop{trigger(29 * time.Minute)}},
		},
		{
			name:    "a stuck trigger loop",
			state:   State{Now: t0, Loops: []Loop{trigger(31 * time.Minute)}},
			wantErr: "trigger stuck: no progress for 31m0s (limit 30m0s)",
		},
		{
			name: "a stuck migration next to a healthy one, and a stale lease",
			state: State{Now: t0, Leadership: leader(time.Minute), Loops: []Loop{
				{Name: "migration of secrets", LastBeat: t0.Add(-time.Second), StallAfter: 5 * time.Minute},
				{Name: "migration of widgets.example.com", LastBeat: t0.Add(-6 * time.Minute), StallAfter: 5 * time.Minute},
			}},
			wantErr: "leading without renewing the lease for 1m0s (lease duration 15s); migration of widgets.example.com stuck: no progress for 6m0s (limit 5m0s)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectError(t, Live(tt.state), tt.wantErr)
		})
	}
}

func TestStallAfter(t *testing.T) {
	tests := []struct{ interval, want time.Duration }{
		{0, 5 * time.Minute},
		{2 * time.Second, 5 * time.Minute},
		{10 * time.Minute, 30 * time.Minute},
		{time.Hour, 3 * time.Hour},
	}
	for _, tt := range tests {
		if got := StallAfter(tt.interval); got != tt.want {
			t.Errorf("StallAfter(%s) = %s, want %s", tt.interval, got, tt.want)
		}
	}
}

func expectError(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("got %q, want no error", err)
	case want != "" && err == nil:
		t.Errorf("got no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("got %q, want one containing %q", err, want)
	}
}
