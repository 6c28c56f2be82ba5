package migrator_test

import (
	"testing"
	"time"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// Under a rate cap, svm sends no list beside its writes: a request more at
// once waits at the server ahead of other clients' (docs/design.md#under-a-rate).
// The writes in flight the rate needs are the pacer's (its tests in
// internal/migrator), and depend on how fast this server answers.
func TestUnderARateCapNoListBesideTheWrites(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	const n = 150
	r, _, before := flippedObjects(t, env, n)
	// Every answer takes 75 ms more than the server's: longer than the
	// 67 ms between two requests at 15 a second, so that a list sent on
	// time while a write is answered would be in flight beside it. Lists
	// bring 15 objects each: 10 lists between the writes.
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
	if lists, writes := requests.SentBeside("GET", "PATCH"), requests.SentBeside("PATCH", "GET"); lists+writes > 0 {
		t.Errorf("%d lists sent while a write was in flight, %d writes while a list was; want none", lists, writes)
	}
}
