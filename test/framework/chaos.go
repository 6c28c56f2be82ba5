package framework

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// ChaosSeedEnv names the environment variable that fixes the seed of the
// chaos tests' random choices, to replay a failed run.
const ChaosSeedEnv = "SVM_CHAOS_SEED"

// ChaosSeed returns the seed of this run's random choices: $SVM_CHAOS_SEED
// when set, a fresh one otherwise. It logs the seed either way, so that any
// run, failed or not, can be replayed.
func ChaosSeed(t testing.TB) uint64 {
	t.Helper()
	if s := os.Getenv(ChaosSeedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q is not an unsigned integer: %v", ChaosSeedEnv, s, err)
		}
		t.Logf("chaos seed %d (from %s)", seed, ChaosSeedEnv)
		return seed
	}
	seed := rand.Uint64()
	t.Logf("chaos seed %d (replay this run's choices with %s=%d)", seed, ChaosSeedEnv, seed)
	return seed
}

// ChaosRand is the random source of one scenario, derived from the run's
// seed and the scenario's name: a scenario run alone (go test -run) makes
// the same choices as it did in the whole suite. The seed replays the
// choices (where and how long to break things), not the machine's timing.
func ChaosRand(seed uint64, scenario string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(scenario))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// SeedWidgets makes n widgets in version, spread over namespaces as
// CreateWidgets spreads them and with the same contents, but writes all but
// the first straight into etcd. Creating tens of thousands of objects
// through the API costs minutes of API server CPU on a shared two-core
// machine, and a migration only needs them stored: the first widget is
// created through the API, and its stored form (creationTimestamp,
// generation and managedFields included) is the model for the others, which
// differ only in name, uid and content. kube-apiserver then serves them like
// any other object; a consistent list sees them at once.
func (e *Env) SeedWidgets(t testing.TB, version string, namespaces []string, n int) {
	t.Helper()
	start := time.Now()
	for _, ns := range namespaces {
		e.CreateNamespace(t, ns)
	}
	ctx := Context(t, 5*time.Minute)
	gvr := schema.GroupVersionResource{Group: Widgets.Group, Version: version, Resource: Widgets.Resource}
	first := Widget(version, "widget-00000", 0)
	if _, err := e.Dynamic.Resource(gvr).Namespace(namespaces[0]).Create(ctx, first, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the model widget: %v", err)
	}
	prefix := EtcdPrefix(Widgets.GroupResource())
	resp, err := e.Etcd.Get(ctx, prefix+namespaces[0]+"/widget-00000")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the model widget from etcd: %v (%d values)", err, len(resp.Kvs))
	}
	var model struct {
		Metadata map[string]any `json:"metadata"`
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &model); err != nil {
		t.Fatalf("decode the model widget: %v", err)
	}

	// etcd takes at most 128 operations per transaction by default.
	const batch = 128
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for from := 1; from < n; from += batch {
		g.Go(func() error {
			var ops []clientv3.Op
			for i := from; i < min(from+batch, n); i++ {
				ns, name := namespaces[i%len(namespaces)], fmt.Sprintf("widget-%05d", i)
				obj := Widget(version, name, i).Object
				meta := maps.Clone(model.Metadata)
				for _, k := range []string{"name", "labels", "annotations"} {
					meta[k] = obj["metadata"].(map[string]any)[k]
				}
				meta["namespace"], meta["uid"] = ns, string(uuid.NewUUID())
				obj["metadata"] = meta
				data, err := json.Marshal(obj)
				if err != nil {
					return err
				}
				ops = append(ops, clientv3.OpPut(prefix+ns+"/"+name, string(data)+"\n"))
			}
			_, err := e.Etcd.Txn(ctx).Then(ops...).Commit()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("write widgets into etcd: %v", err)
	}
	t.Logf("made %d widgets in %s", n, time.Since(start).Round(time.Millisecond))
}

// TakeSnapshotInPages is TakeSnapshot listing in pages, as a client of a
// big resource should: one list of tens of thousands of objects can outlast
// the API server's request timeout on a busy machine. The pages are read at
// one resourceVersion, so the snapshot is as consistent as one list.
func (e *Env) TakeSnapshotInPages(t testing.TB, gvr schema.GroupVersionResource) Snapshot {
	t.Helper()
	ctx := Context(t, 5*time.Minute)
	snap := Snapshot{}
	opts := metav1.ListOptions{Limit: 1000}
	for {
		list, err := e.Dynamic.Resource(gvr).List(ctx, opts)
		if err != nil {
			t.Fatalf("list %s: %v", gvr, err)
		}
		for _, item := range list.Items {
			snap[item.GetNamespace()+"/"+item.GetName()] = normalize(item)
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return snap
		}
	}
}

// ExpectUnchangedInPages is ExpectUnchanged with a snapshot taken in pages.
func (e *Env) ExpectUnchangedInPages(t testing.TB, gvr schema.GroupVersionResource, before Snapshot) {
	t.Helper()
	if diff := before.Diff(e.TakeSnapshotInPages(t, gvr)); diff != "" {
		t.Errorf("objects of %s changed (-before +after):\n%s", gvr.Resource, diff)
	}
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Requests counts the requests with method (GET, PATCH, ...) to objects of
// resource (not to their subresources) that reached the proxy, whether the
// API server answered them or not: what the client sent. Unlike the API
// server's own counters, this count survives the API server's restarts.
func (p *Proxy) Requests(method, resource string) int {
	n := 0
	for _, ev := range p.Events() {
		if ev.Method == method && objectResource(ev.Path) == resource {
			n++
		}
	}
	return n
}

// objectResource is the resource an API path addresses, "" for a path to
// a subresource or to no resource at all.
func objectResource(path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(segs) > 2 && segs[0] == "api":
		segs = segs[2:]
	case len(segs) > 3 && segs[0] == "apis":
		segs = segs[3:]
	default:
		return ""
	}
	// namespaces/<ns>/<resource>/...; namespaces/<ns> alone is a namespace.
	if len(segs) > 2 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	if len(segs) > 2 {
		return ""
	}
	return segs[0]
}

// Sum is the sum of the counter or gauge name over every series that has
// labels (a subset of its labels, as name, value, ...), such as a counter
// over all its reasons.
func (m Metrics) Sum(name string, labels ...string) float64 {
	family := m[name]
	if family == nil {
		return 0
	}
	total := 0.0
	for _, metric := range family.Metric {
		if !hasLabels(metric, labels) {
			continue
		}
		switch {
		case metric.Counter != nil:
			total += metric.Counter.GetValue()
		case metric.Gauge != nil:
			total += metric.Gauge.GetValue()
		}
	}
	return total
}
