// Package faults_test runs svm through a proxy that breaks requests the way
// networks, load balancers and overloaded API servers do: resets, 500s,
// 503s, 429s with Retry-After, slow, stalled and truncated answers, and
// outages that fail everything. Every scenario checks that the migration
// completes, that etcd's raw values are all in the target version and the
// objects' contents unchanged, and that svm's retries stay bounded.
package faults_test

import (
	"flag"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

func TestMain(m *testing.M) {
	// client-go logs every answer the proxy breaks; the proxy's records
	// say more, and the test log stays readable.
	// Errors would still reach stderr below the threshold's default.
	flags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(flags)
	for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := flags.Set(name, value); err != nil {
			panic(err)
		}
	}
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// TestMigrationsRideOutFaults runs every scenario after a storage version
// flip that leaves every widget to be rewritten: svm's engine, in the test
// process, against each fault alone, long Retry-After waits and an outage
// that outlasts its retries; `svm controller`, as a process, through an
// outage; and, with more widgets, the engine against all faults at once and
// against a slowdown.
//
// Most of a scenario's time is spent waiting out the faults it injects, so
// the scenarios run side by side, each on a control plane of its own, and
// the package takes about as long as its slowest scenario. Starting a
// control plane costs seconds of CPU, so the scenarios that take seconds
// share one in turn, as all of them once did: each flips the storage
// version again, so every widget needs a rewrite again.
//
// go test runs at most -parallel subtests at once, and starts the waiting
// ones in no fixed order, except that a subtest's own subtests wait until
// it has started. So the three slowest scenarios are direct subtests, and
// the others are subtests of "shorter": they start only once the slowest
// have, which would otherwise start last as often as not.
func TestMigrationsRideOutFaults(t *testing.T) {
	for _, fault := range slowFaults {
		// Named as a subtest of "alone" (go test -run splits names at
		// slashes), like the quick ones.
		t.Run("alone/30% "+string(fault), func(t *testing.T) {
			t.Parallel()
			testFaultAlone(t, newFixture(t, 150), fault, 0.3)
		})
	}
	t.Run("controller outage", func(t *testing.T) {
		t.Parallel()
		testControllerOutage(t, newFixture(t, 150))
	})
	t.Run("shorter", func(t *testing.T) {
		t.Parallel()
		t.Run("alone", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 150)
			for _, fault := range framework.Faults {
				if !slices.Contains(slowFaults, fault) {
					t.Run("30% "+string(fault), func(t *testing.T) { testFaultAlone(t, f, fault, 0.3) })
				}
			}
		})
		t.Run("long Retry-After", func(t *testing.T) {
			t.Parallel()
			testLongRetryAfter(t, newFixture(t, 150))
		})
		t.Run("engine outage", func(t *testing.T) {
			t.Parallel()
			testOutageLongerThanRetries(t, newFixture(t, 150))
		})
		// All faults at once must each hit some request, and the slowdown
		// must come after 200 writes and well before the last: both need
		// more widgets, and they share them.
		t.Run("1000 widgets", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 150)
			t.Run("mixed faults", func(t *testing.T) {
				f.grow(t, 1000)
				testMixedFaults(t, f)
			})
			t.Run("adaptive pacing", func(t *testing.T) {
				// Nothing to add after the mixed faults; this lets the
				// scenario run alone (go test -run).
				// 200 writes before, 700 answers through the seat
				// and plenty after: 1000 more, in namespaces of their
				// own.
				f.grow(t, 1000)
				f.growIn(t, []string{"ns-i", "ns-j", "ns-k", "ns-l"}, 2000)
				testAdaptivePacing(t, f)
			})
		})
	})
}

// slowFaults cost a scenario tens of seconds, each broken request a wait
// of seconds (a Retry-After, a request timeout): each gets a control plane
// of its own, so as not to hold up the quick ones.
var slowFaults = []framework.Fault{framework.Throttle, framework.Stall}

var widgetsPrefix = framework.EtcdPrefix(framework.Widgets.GroupResource())

// fixture is a control plane with widgets that one scenario, or a few in
// turn, migrate: each flips the storage version, so every widget needs a
// rewrite again. It is not a shared control plane (framework.Shared):
// the scenarios count every write to widgets on the API server and run
// `svm controller`, which acts on every migration in the cluster.
type fixture struct {
	env     *framework.Env
	objects int
	storage string
}

func newFixture(t *testing.T, objects int) *fixture {
	t.Helper()
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"ns-a", "ns-b", "ns-c", "ns-d"}, objects)
	return &fixture{env: env, objects: objects, storage: "v1"}
}

// flip makes the other version the storage version, so that every widget
// is stored in an outdated one, and returns their contents before.
func (f *fixture) flip(t *testing.T) framework.Snapshot {
	t.Helper()
	before := f.env.TakeSnapshot(t, framework.Widgets)
	f.storage = f.env.FlipStorage(t, framework.WidgetResource)
	f.env.WaitWritesStoredIn(t, framework.WidgetResource, f.storage)
	return before
}

// grow adds widgets in four more namespaces, stored in the current storage
// version, until there are n.
func (f *fixture) grow(t *testing.T, n int) {
	t.Helper()
	f.growIn(t, []string{"ns-e", "ns-f", "ns-g", "ns-h"}, n)
}

// growIn adds widgets in namespaces, which must hold none yet, until there
// are n.
func (f *fixture) growIn(t *testing.T, namespaces []string, n int) {
	t.Helper()
	f.env.CreateWidgets(t, f.storage, namespaces, n-f.objects)
	f.objects = n
}

// expectMigrated checks etcd's raw values and the objects' contents, and
// reports whether both held.
func (f *fixture) expectMigrated(t *testing.T, before framework.Snapshot) bool {
	t.Helper()
	f.env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/" + f.storage: f.objects})
	f.env.ExpectUnchanged(t, framework.Widgets, before)
	return !t.Failed()
}

// serverWrites is the API server's own count of writes (PUT and PATCH) to widgets.
func (f *fixture) serverWrites(t *testing.T) int {
	t.Helper()
	return f.env.ServerWrites(t, "widgets")
}

// newMigrator builds the engine as svm does, on a client of cfg.
func newMigrator(t *testing.T, cfg *rest.Config, opts migrator.Options) *migrator.Migrator {
	t.Helper()
	m, err := migrator.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// isWidgets tells the migration's lists and writes from everything else a
// client sends (discovery, svm's bookkeeping).
func isWidgets(r framework.FaultRecord) bool {
	return strings.HasSuffix(r.Path, "/widgets") || strings.Contains(r.Path, "/widgets/")
}

// isMigration tells the migration's requests, discovery of its resource
// included, from svm's bookkeeping.
func isMigration(r framework.FaultRecord) bool {
	return isWidgets(r) || r.Path == "/apis/"+framework.Widgets.GroupVersion().String()
}

// sentAgain returns the requests that svm sent again afterwards (the same
// method, path and query), keyed by their index in log.
func sentAgain(log framework.FaultLog) map[int]bool {
	again := map[int]bool{}
	last := map[string]int{}
	for i, r := range log {
		if j, ok := last[r.Key()]; ok {
			again[j] = true
		}
		last[r.Key()] = i
	}
	return again
}

// expectSkips checks that the objects svm skipped are exactly those whose
// write the API server applied without svm getting the answer: the retry
// of such a write finds the object already rewritten (409), which counts
// as skipped. A success broken by Stall or Truncate was surely lost after
// the write; another forwarded write that svm sent again was one it gave
// up waiting for, which the server may or may not have applied.
func expectSkips(t *testing.T, log framework.FaultLog, skipped int64) {
	t.Helper()
	again := sentAgain(log)
	lost, maybe := map[string]bool{}, map[string]bool{}
	for i, r := range log {
		switch {
		case r.Method != http.MethodPatch || !r.Forwarded:
		case (r.Fault == framework.Stall || r.Fault == framework.Truncate) && r.Status == http.StatusOK:
			lost[r.Path] = true
		case again[i]:
			// Among them a Stall or Truncate of a write that svm had given
			// up on before the API server answered it.
			maybe[r.Path] = true
		}
	}
	for path := range lost {
		delete(maybe, path)
	}
	if skipped < int64(len(lost)) || skipped > int64(len(lost)+len(maybe)) {
		t.Errorf("%d objects skipped, want %d (writes applied but unanswered) and up to %d more (writes abandoned)", skipped, len(lost), len(maybe))
	}
}

// expectWrites checks the proxy's count of writes against the API
// server's: they agree but for writes svm gave up waiting for, which may
// have been cancelled before they reached the server.
func expectWrites(t *testing.T, log framework.FaultLog, server int) {
	t.Helper()
	again := sentAgain(log)
	abandoned := 0
	for i, r := range log {
		if r.Method == http.MethodPatch && r.Forwarded && again[i] && !r.Fault.Fails() {
			abandoned++
		}
	}
	if server > log.Writes() || server < log.Writes()-abandoned {
		t.Errorf("the API server counted %d writes, the proxy forwarded %d (%d abandoned)", server, log.Writes(), abandoned)
	}
}

// expectProgress checks that every object was handled once and none failed.
func expectProgress(t *testing.T, p migrator.Progress, objects int) {
	t.Helper()
	if p.Listed != int64(objects) || p.Migrated()+p.Skipped() != int64(objects) || p.Failed != 0 {
		t.Errorf("progress %+v: want %d listed, rewritten or skipped, none failed", p, objects)
	}
}

// refused reports a status the API server sends when it did not do what
// it was asked and the client should ask again: 429 (APF) or 5xx.
func refused(status int) bool {
	return status == http.StatusTooManyRequests || status >= http.StatusInternalServerError
}

// expectOneRepeatPerFailure checks that svm sent a request again only
// when it got no usable answer, and then exactly once more: every request
// broken by a fault, refused by the server, abandoned, or ended in an
// error at svm (its own timeout ran out: on a loaded machine, even on an
// answer the proxy sent quickly) is followed by one repeat, and no other
// request is repeated.
func expectOneRepeatPerFailure(t *testing.T, log framework.FaultLog) {
	t.Helper()
	again := sentAgain(log)
	late := 0
	for i, r := range log {
		failed := r.Fault.Fails() || r.Abandoned || r.ClientError || refused(r.Status)
		switch {
		case failed && !again[i]:
			t.Errorf("%s got no usable answer (%+v) and was never sent again", r.Key(), r)
		case again[i] && !failed:
			t.Errorf("%s was sent again after svm read its whole answer (%+v)", r.Key(), r)
		case again[i] && (r.Abandoned || r.ClientError) && !r.Fault.Fails() && !refused(r.Status):
			late++
		}
	}
	if late > 0 {
		t.Logf("%d requests were sent again after svm gave up waiting for the API server", late)
	}
}
