package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

const (
	migratedObjects  = "storage_migrator_core_migrator_migrated_objects"
	remainingObjects = "storage_migrator_core_migrator_remaining_objects"
	migrations       = "storage_migrator_core_migrator_migrations"
	duration         = "storage_migrator_core_migrator_migration_duration_seconds"
	running          = "storage_migrator_core_migrator_running_migrations"
	listedObjects    = "storage_migrator_core_migrator_listed_objects"
	requests         = "storage_migrator_core_migrator_requests_total"
	retries          = "storage_migrator_core_migrator_retries_total"
	limiterWait      = "storage_migrator_core_migrator_rate_limiter_wait_seconds"
	pacerInFlight    = "storage_migrator_core_migrator_pacer_writes_in_flight"
	pacerWindow      = "storage_migrator_core_migrator_pacer_window"
	pacerLatency     = "storage_migrator_core_migrator_pacer_smoothed_latency_seconds"
	pacerDecisions   = "storage_migrator_core_migrator_pacer_decisions_total"
	widgetsLabel     = "widgets.example.com"
)

// endpointArgs run the controller with its metrics and probes on free
// loopback ports: they follow framework.ControllerArgs' "0"s, and the last
// value of a flag wins.
func endpointArgs(metricsAddr, healthAddr string, extra ...string) []string {
	return framework.ControllerArgs(append([]string{"--trigger=false",
		"--metrics-bind-address", metricsAddr, "--health-probe-bind-address", healthAddr}, extra...)...)
}

// waitStatus polls http://addr/path until it answers want.
func waitStatus(t *testing.T, addr, path string, want int, timeout time.Duration) {
	t.Helper()
	var code int
	var body []byte
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		code, body = framework.Get(t, addr, path)
		return code == want, nil
	})
	if err != nil {
		t.Fatalf("%s%s answered %d (%q), want %d", addr, path, code, body, want)
	}
}

// TestMetricsEventsAndProbes follows one migration through the controller's
// metrics (scraped while it runs and after), its events, and its probes.
func TestMetricsEventsAndProbes(t *testing.T) {
	t.Parallel()
	const n, chunkSize, qps = 1200, 200, 80
	// Under --qps a list brings a second's writes at that rate (ten at
	// least, --chunk-size at most), so each page here is 80 objects.
	const chunk = min(chunkSize, max(10, qps))
	env, _ := setup(t, n)
	metricsAddr, healthAddr := framework.FreeAddress(t), framework.FreeAddress(t)
	// --qps slows the migration to a dozen seconds or so, time to scrape it.
	svm := env.StartSVM(t, endpointArgs(metricsAddr, healthAddr, "--qps", fmt.Sprint(qps), "--chunk-size", fmt.Sprint(chunkSize))...)
	waitStatus(t, healthAddr, "/readyz", http.StatusOK, 2*time.Minute)
	waitStatus(t, healthAddr, "/healthz", http.StatusOK, 10*time.Second)

	env.CreateMigration(t, "widgets", framework.Widgets)

	// While it runs: objects are rewritten, fewer remain, and neither ever
	// goes the wrong way.
	// Adaptive pacing's state is in the metrics and, at every saved
	// chunk, in the migration's status, which svm status shows.
	type sample struct{ migrated, remaining, listed float64 }
	var samples []sample
	type pacing struct{ inFlight, window, latency, decisions float64 }
	var pacings []pacing
	statusShown := ""
	kubeconfig := env.KubeconfigFile(t)
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		m := framework.Scrape(t, metricsAddr)
		s := sample{m.Value(migratedObjects, "resource", widgetsLabel), m.Value(remainingObjects, "resource", widgetsLabel), m.Value(listedObjects, "resource", widgetsLabel)}
		if s.migrated > 0 && s.migrated < n {
			samples = append(samples, s)
			decisions := 0.0
			for _, d := range []string{"grow", "knee", "back-off", "hold"} {
				// Pacing's decisions are counted over all migrations
				// (docs/metrics.md#cardinality): only widgets runs here.
				decisions += m.Value(pacerDecisions, "decision", d)
			}
			pacings = append(pacings, pacing{m.Value(pacerInFlight, "resource", widgetsLabel), m.Value(pacerWindow, "resource", widgetsLabel),
				m.Value(pacerLatency, "resource", widgetsLabel), decisions})
			if statusShown == "" {
				if mig := env.GetMigration(t, "widgets"); mig.Status.Pacing != nil && mig.HasCondition(migrationv1alpha1.MigrationRunning) && !mig.IsFinished() {
					code, stdout, stderr := framework.RunSVM(t, kubeconfig, time.Minute, "status")
					if code != 0 {
						t.Fatalf("svm status exited %d: %s", code, stderr)
					}
					statusShown = stdout
				}
			}
		}
		return m.Value(migrations, "resource", widgetsLabel, "status", "succeeded") == 1, nil
	})
	if err != nil {
		t.Fatalf("the migration never counted as succeeded: %v; samples %v", err, samples)
	}
	if len(samples) < 2 {
		t.Fatalf("only %d scrapes during the migration (%v); too fast to tell anything", len(samples), samples)
	}
	t.Logf("%d scrapes during the migration (migrated, remaining, listed), from %v to %v", len(samples), samples[0], samples[len(samples)-1])
	for i, s := range samples {
		if s.remaining <= 0 && s.listed < n || s.remaining > n-chunk {
			t.Errorf("sample %d: %v remaining with %v listed, want between 0 and %d until the last chunk", i, s.remaining, s.listed, n-chunk)
		}
		// Listing runs ahead of writing, never past the objects there are.
		if s.listed < s.migrated || s.listed > n {
			t.Errorf("sample %d: %v listed with %v migrated, want between them and %d", i, s.listed, s.migrated, n)
		}
		if i > 0 && (s.migrated < samples[i-1].migrated || s.remaining > samples[i-1].remaining) {
			t.Errorf("sample %d went backwards: %v after %v", i, s, samples[i-1])
		}
	}
	if first, last := samples[0], samples[len(samples)-1]; last.migrated <= first.migrated {
		t.Errorf("migrated objects did not grow while scraped: %v", samples)
	}
	t.Logf("pacing scraped (in flight, window, smoothed latency, decisions): %v", pacings)
	last := pacings[len(pacings)-1]
	for i, p := range pacings {
		// Before the first decision there is nothing to show. After a
		// cut, the writes sent before it are still in flight: more than
		// the window, never more than --workers.
		if p.decisions > 0 && (p.window < 1 || p.window > 64 || p.inFlight < 0 || p.inFlight > 64) {
			t.Errorf("pacing sample %d: %v writes in flight of a window of %v, want a window of 1 to 64 (--workers' default) and at most 64 in flight", i, p.inFlight, p.window)
		}
	}
	if last.decisions == 0 || last.latency <= 0 {
		t.Errorf("pacing during the migration: %+v, want decisions counted and a smoothed latency", last)
	}
	// Under --qps the line names the cap, and the writes in flight the
	// rate needs beside the window (internal/status/testdata/running-paced-qps.txt).
	shown := strings.Join(strings.Fields(statusShown), " ") // unwrapped
	if !strings.Contains(shown, "Pacing widgets: ") || !strings.Contains(shown, fmt.Sprintf(" under --qps %d: ", qps)) ||
		!strings.Contains(shown, " in flight, of the ") || !strings.Contains(shown, " a window of ") {
		t.Errorf("svm status during the migration, with status.pacing set, does not show its pacing:\n%s", statusShown)
	}

	m := env.WaitMigrationSucceeded(t, "widgets", time.Minute)
	after := framework.Scrape(t, metricsAddr)
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"migrated objects", after.Value(migratedObjects, "resource", widgetsLabel), n},
		{"succeeded migrations", after.Value(migrations, "resource", widgetsLabel, "status", "succeeded"), 1},
		{"failed migrations", after.Value(migrations, "resource", widgetsLabel, "status", "failed"), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	// The gauges of the run went with it, listed_objects too (memory flat
	// in the resources migrated).
	for _, name := range []string{running, listedObjects, remainingObjects, pacerInFlight, pacerWindow, pacerLatency} {
		if after.Has(name, "resource", widgetsLabel) {
			t.Errorf("%s of widgets still served after its migration ended", name)
		}
	}
	// Every object takes one write and every page one list, plus one
	// request per retry: a server this busy may time a request out. A last
	// page that ends exactly at the last object may or may not say so. The
	// write is an update, or a patch where managedFields name the version
	// the flip left.
	writes := after.Value(requests, "resource", widgetsLabel, "verb", "update") + after.Value(requests, "resource", widgetsLabel, "verb", "patch")
	lists := after.Value(requests, "resource", widgetsLabel, "verb", "list")
	retried := after.Sum(retries, "resource", widgetsLabel)
	if sent := writes + lists - retried; writes < n || lists < n/chunk || sent < n+n/chunk || sent > n+n/chunk+1 {
		t.Errorf("%v write and %v list requests with %v retries, want %d writes and %d or %d lists besides the retries",
			writes, lists, retried, n, n/chunk, n/chunk+1)
	}
	// The duration is by status alone: widgets is the one migration yet.
	if got := after.HistogramCount(duration, "status", "succeeded"); got != 1 {
		t.Errorf("duration histogram count %d, want 1", got)
	}
	if got := after.HistogramCount(limiterWait); got < n {
		t.Errorf("rate limiter waits observed %d times, want at least once per request (%d)", got, n)
	}
	// controller-runtime's own metrics are served next to svm's.
	if after["controller_runtime_reconcile_total"] == nil {
		t.Error("controller-runtime's metrics are missing from the endpoint")
	}

	// Every transition has an event, and none carries a widget's content.
	var events []eventsv1.Event
	err = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		events = env.Events(t, "StorageVersionMigration", "widgets")
		reasons := framework.EventReasons(events)
		return reasons["Started"] == 1 && reasons["AllObjectsRewritten"] == 1, nil
	})
	if err != nil {
		t.Fatalf("events of the migration: %v, want Started and AllObjectsRewritten", framework.EventReasons(events))
	}
	for _, ev := range events {
		if ev.Regarding.UID != m.UID || ev.ReportingController != "svm-controller" {
			t.Errorf("event %s regards %+v, reported by %q; want the migration, by svm-controller", ev.Reason, ev.Regarding, ev.ReportingController)
		}
		expectNoWidgetContent(t, "event note", []byte(ev.Note))
	}
	expectNoWidgetContent(t, "svm's log", svm.Log(t))

	// A migration that cannot complete is counted and told as failed.
	env.CreateMigration(t, "gadgets", schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"})
	env.WaitMigration(t, "gadgets", time.Minute, "failed", framework.Failed)
	err = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		events = env.Events(t, "StorageVersionMigration", "gadgets")
		return framework.EventReasons(events)["Warning/Failed"] == 1, nil
	})
	if err != nil {
		t.Fatalf("events of the failed migration: %v, want Warning/Failed", framework.EventReasons(events))
	}
	for _, ev := range events {
		if ev.Reason == "Failed" && !strings.HasPrefix(ev.Note, "ResourceNotFound: ") {
			t.Errorf("Failed event note %q, want it to start with the condition's reason", ev.Note)
		}
	}
	failed := framework.Scrape(t, metricsAddr)
	if got := failed.Value(migrations, "resource", "gadgets.example.com", "status", "failed"); got != 1 {
		t.Errorf("failed migrations of gadgets = %v, want 1", got)
	}
	if got := failed.HistogramCount(duration, "status", "failed"); got != 1 {
		t.Errorf("duration histogram count of failed migrations %d, want 1 (gadgets)", got)
	}

	waitStatus(t, healthAddr, "/healthz", http.StatusOK, 10*time.Second)
	waitStatus(t, healthAddr, "/readyz", http.StatusOK, 10*time.Second)
}

// expectNoWidgetContent fails if data holds anything of a widget beyond
// its name: its spec, data, labels or annotations (see framework.Widget).
func expectNoWidgetContent(t *testing.T, what string, data []byte) {
	t.Helper()
	for _, content := range []string{"widget number", "payload", strings.Repeat("0", 64), `"color"`, "parity"} {
		if bytes.Contains(data, []byte(content)) {
			t.Errorf("%s contains widget content %q", what, content)
		}
	}
}

// TestTwoReplicasBecomeReady: with leader election, the leader and the
// follower are both ready (the follower once it has seen the leader's
// lease), both live, and the follower takes over when the leader leaves.
func TestTwoReplicasBecomeReady(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	type replica struct {
		proc                *framework.Process
		metricsAddr, health string
	}
	var replicas []replica
	for range 2 {
		r := replica{metricsAddr: framework.FreeAddress(t), health: framework.FreeAddress(t)}
		r.proc = env.StartSVM(t, endpointArgs(r.metricsAddr, r.health)...)
		replicas = append(replicas, r)
	}
	for _, r := range replicas {
		waitStatus(t, r.health, "/readyz", http.StatusOK, 2*time.Minute)
		waitStatus(t, r.health, "/healthz", http.StatusOK, 10*time.Second)
	}
	leaders := 0
	var leader, follower replica
	for _, r := range replicas {
		if bytes.Contains(r.proc.Log(t), []byte("Successfully acquired lease")) {
			leaders++
			leader = r
		} else {
			follower = r
		}
	}
	if leaders != 1 {
		t.Fatalf("%d replicas acquired the lease, want 1", leaders)
	}

	// The leader steps down on SIGTERM; the follower leads, still ready.
	if !leader.proc.Stop(30 * time.Second) {
		t.Fatal("the leader did not exit within 30s of SIGTERM")
	}
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return bytes.Contains(follower.proc.Log(t), []byte("Successfully acquired lease")), nil
	})
	if err != nil {
		t.Fatal("the follower did not take over")
	}
	waitStatus(t, follower.health, "/readyz", http.StatusOK, time.Minute)
	waitStatus(t, follower.health, "/healthz", http.StatusOK, 10*time.Second)
}
