package migrator_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestHonoursRetryAfter throttles svm's writes with 429 and Retry-After: 1
// through a proxy: the migration completes, no throttled request is retried
// sooner than the server asked, and the request count stays bounded.
func TestHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	const n = 200
	r, _, _ := flippedObjects(t, env, n)
	proxy := env.StartProxy(t)
	var throttled atomic.Int32
	proxy.Intercept(func(r *http.Request) (int, http.Header, bool) {
		// Throttle the first 20 writes.
		if r.Method == http.MethodPatch && throttled.Add(1) <= 20 {
			return http.StatusTooManyRequests, http.Header{"Retry-After": {"1"}}, true
		}
		return 0, nil, false
	})
	m, _ := framework.NewMigrator(t, proxy.Config, migrator.Options{Workers: 4})
	start := time.Now()
	res, err := m.Run(framework.Context(t, 2*time.Minute), migrator.Request{Resource: r.GVR("v1")})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if res.Progress.Migrated() != n {
		t.Errorf("rewritten %d, want %d", res.Progress.Migrated(), n)
	}
	env.ExpectStored(t, r.EtcdPrefix(), inV2(r, n))
	// Each throttled object was retried, and not before its Retry-After.
	events := proxy.Events()
	lastThrottle := map[string]time.Time{}
	patches := 0
	for _, ev := range events {
		if ev.Method != http.MethodPatch {
			continue
		}
		patches++
		if at, ok := lastThrottle[ev.Path]; ok {
			if gap := ev.Time.Sub(at); gap < 900*time.Millisecond {
				t.Errorf("%s retried %s after a 429 with Retry-After: 1", ev.Path, gap)
			}
			delete(lastThrottle, ev.Path)
		}
		if ev.Status == http.StatusTooManyRequests {
			lastThrottle[ev.Path] = ev.Time
		}
	}
	if patches != n+20 {
		t.Errorf("%d write requests, want %d (each object once, plus one retry per 429)", patches, n+20)
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("took %s: the Retry-After pauses cannot have been honoured", took)
	}
}
