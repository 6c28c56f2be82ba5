package migrator_test

import (
	"testing"
	"time"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// Under a rate cap that one write at a time meets, svm sends one request
// at a time, as the in-tree migrator writes: no list beside the writes,
// and no second write beside a slow one. A request more at once waits at
// the server ahead of other clients' (docs/design.md#under-a-rate).
func TestUnderARateCapOneRequestAtATime(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	const n = 150
	r, _, before := flippedObjects(t, env, n)
	// Every answer takes 75 ms more than the server's: longer than the
	// 67 ms between two requests at 15 a second, so that a request sent
	// on time while another is answered is in flight beside it, but
	// under one and a half of them, so that the rate needs one write at a
	// time (while the server answers in under 25 ms). Lists bring 15
	// objects each: 10 lists between the writes.
	proxy := env.StartFaultProxy(t, framework.FaultOptions{})
	proxy.SlowAll(75 * time.Millisecond)
	m, requests := framework.NewMigrator(t, proxy.Config, migrator.Options{ChunkSize: 500, Workers: 16, Limiter: migrator.NewLimiter(15, 0)})
	res, err := m.Run(framework.Context(t, 2*time.Minute), migrator.Request{Resource: r.GVR("v1")})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	env.ExpectStored(t, r.EtcdPrefix(), inV2(r, n))
	env.ExpectUnchanged(t, r.GVR("v1"), before)
	if res.Progress.Restored != n {
		t.Errorf("rewritten %d, want %d", res.Progress.Restored, n)
	}
	if lists := requests.Count("GET"); lists < n/15 {
		t.Errorf("%d lists, want at least %d: a second's writes at a time", lists, n/15)
	}
	if most := requests.MostInFlight(); most != 1 {
		t.Errorf("%d requests in flight at once, want 1", most)
	}
}
