package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/cli"
	"github.com/svm-project/svm/internal/etcdvalue"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/test/framework"
)

// manyCRDsLabel marks the benchmark's CRDs, so that one list finds them.
const manyCRDsLabel = "bench.svm.io/many-crds"

// manyCRDsNamespace holds the benchmark's custom resources.
const manyCRDsNamespace = "bench"

// manyCRDsExtraWait is what the target allows beyond svm's own wait after
// a storage flip (--crd-settle-delay and --crd-drain-margin): every CRD
// migrated and its storedVersions pruned within that wait plus 120 s.
const manyCRDsExtraWait = 120 * time.Second

// manyCRDsMemoryTarget is the peak RSS svm must stay under with a
// thousand CRDs.
const manyCRDsMemoryTarget = 128e6

// manyCRDsMode is how svm runs in a part of BenchmarkManyCRDs.
type manyCRDsMode struct {
	name string
	// controllerManager runs kube-controller-manager (its in-tree
	// migrator and the garbage collector it reads from) beside svm,
	// whose --executor is auto.
	controllerManager bool
}

var manyCRDsModes = []manyCRDsMode{
	{name: "engine"},
	{name: "in-tree", controllerManager: true},
}

// manyCRDsRun is what one part measured.
type manyCRDsRun struct {
	mode           manyCRDsMode
	crds, objects  int
	settleAndDrain time.Duration
	// seen is when svm had a StorageState of every CRD's resource, and
	// firstSight when each of them recorded its objects as migrated to
	// v1 (svm's first-sight migrations done), counted from svm's start.
	seen, firstSight time.Duration
	// flipSent is how long sending every CRD's flip took; done is when,
	// counted from the first flip sent, every CRD's storedVersions were
	// [v2] and etcd held every object in v2 (0: not within the limit),
	// stored when etcd held every object in v2.
	flipSent, done, stored time.Duration
	// pruned is how many CRDs had storedVersions [v2] at the end.
	pruned int
	// peakRSS is svm's VmHWM at the end, sampled the highest VmRSS sampled
	// every 100 ms over the run, firstSightRSS the highest sampled until
	// first sight was done. VmRSS counts the pages of svm's executable
	// it has read (RssFile: clean, shared, given back to the kernel under
	// pressure) besides its own memory: anon is the highest RssAnon
	// sampled, the heap, stacks and the runtime's own.
	peakRSS, sampledRSS, firstSightRSS, anon, firstSightAnon int64
	// cpu is svm's CPU from the flip on.
	cpu time.Duration
	// changed counts objects whose content differs after the migration
	// (resourceVersion and managedFields' times aside).
	changed int
	// inTree counts the in-tree migrations svm handed its migrations to.
	inTree int
	// requests counts the requests the API server answered from the
	// flip to the end, by kind (serverRequests): the benchmark's own
	// flips and polls among them.
	requests map[string]float64
	// events counts the Events created from the flip to the end (svm's
	// alone here), by the kind of object they regard and their reason.
	events map[string]float64
}

// BenchmarkManyCRDs measures svm controller at its defaults (GOMEMLIMIT and
// GOGC as the shipped chart sets them) on many CRDs whose storage versions all flip
// at once: SVM_BENCH_CRDS CRDs (default 1000), each of its own group,
// served in v1 and v2 and stored in v1, with SVM_BENCH_CRD_OBJECTS objects
// each (default 10). svm starts once they exist, and the flip comes once
// svm has seen every one (a StorageState recording its objects as
// migrated to v1, after the first-sight migrations). Every CRD's storage
// version is then set to v2, as fast as requests go, and the pass ends
// when every CRD's status.storedVersions is [v2] and etcd holds every
// object in v2; the target is svm's own wait after a flip
// (--crd-settle-delay and --crd-drain-margin, read from its flags'
// defaults) plus 120 s. svm's peak RSS counts the whole run, first sight
// included; the objects' content is compared before and after. It runs
// in two parts, each on a control plane of its own: engine (svm's engine
// alone, no kube-controller-manager) and in-tree (kube-controller-manager
// running, and svm's default --executor=auto handing the migrations to
// it). SVM_BENCH_CRD_TIMEOUT (minutes, default 60) bounds the wait after
// the flip. With SVM_BENCH_PROFILE_DIR set, svm runs with --profiling and
// the benchmark saves its heap profiles there (after a GC) at first sight
// and after the flip, with its goroutines, and CPU profiles of svm and
// the API server over the minute after the settle-and-drain wait.
// SVM_BENCH_CRDS_SVM, the path of an svm binary, runs that build instead
// of the run's (a build of an earlier commit: what a change bought). Run it with `make bench
// BENCH=BenchmarkManyCRDs`, or one part: BenchmarkManyCRDs/engine.
func BenchmarkManyCRDs(b *testing.B) {
	svmBinary = framework.SVMBinary(b)
	n := envInt("SVM_BENCH_CRDS", 1000)
	m := envInt("SVM_BENCH_CRD_OBJECTS", 10)
	wait := settleAndDrain(b)
	var runs []manyCRDsRun
	for _, mode := range manyCRDsModes {
		b.Run(mode.name, func(b *testing.B) {
			runs = append(runs, manyCRDsPart(b, mode, n, m, wait))
		})
	}
	if len(runs) == 0 {
		return
	}
	var results []result
	var targets []target
	for _, r := range runs {
		results = append(results, r.result())
		targets = append(targets, r.targets()...)
	}
	writeResults(b, results, []string{manyCRDsNote(runs)}, targets)
}

// settleAndDrain is what svm controller waits, by default, after a
// custom resource's storage changes before it migrates it: its
// --crd-settle-delay and --crd-drain-margin.
func settleAndDrain(b *testing.B) time.Duration {
	b.Helper()
	cmd, _, err := cli.NewRootCommand(io.Discard, io.Discard).Find([]string{"controller"})
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for _, name := range []string{"crd-settle-delay", "crd-drain-margin"} {
		f := cmd.Flags().Lookup(name)
		if f == nil {
			b.Fatalf("svm controller has no --%s", name)
		}
		d, err := time.ParseDuration(f.DefValue)
		if err != nil {
			b.Fatalf("--%s's default %q: %v", name, f.DefValue, err)
		}
		total += d
	}
	return total
}

// manyCRD is the i-th CRD's resource.
func manyCRD(i int) framework.Resource {
	return framework.Resource{Group: fmt.Sprintf("g%04d.manycrds.example.com", i), Plural: "things", Kind: "Thing"}
}

// manyCRDsPart runs one part on a control plane of its own.
func manyCRDsPart(b *testing.B, mode manyCRDsMode, n, m int, wait time.Duration) manyCRDsRun {
	run := manyCRDsRun{mode: mode, crds: n, objects: m, settleAndDrain: wait}
	env := framework.Start(b, benchControlPlane())
	env.InstallCRDs(b, framework.CRDBasesDir())
	env.CreateNamespace(b, manyCRDsNamespace)
	rs := make([]framework.Resource, n)
	for i := range rs {
		rs[i] = manyCRD(i)
	}
	start := time.Now()
	createManyCRDs(b, env, rs)
	b.Logf("%d CRDs created and served in %s", n, time.Since(start).Round(time.Second))
	start = time.Now()
	createManyObjects(b, env, rs, m)
	b.Logf("%d objects created in %s", n*m, time.Since(start).Round(time.Second))
	before, _ := readManyObjects(b, env, rs)
	if mode.controllerManager {
		startControllerManager(b, env)
	}
	svm := startManyCRDsController(b, env, mode)
	defer svm.stop()
	sampler := svm.sampleRSS()
	defer sampler.stop()

	// First sight.
	run.seen, run.firstSight = waitFirstSight(b, env, rs, svm.started)
	run.firstSightRSS, run.firstSightAnon = sampler.peak(), sampler.peakAnon()
	b.Logf("svm had a StorageState of every CRD after %s, recorded every one migrated after %s; RSS %.0f MB (peak sampled %.0f MB)",
		run.seen.Round(time.Second), run.firstSight.Round(time.Second), float64(framework.RSS(svm.pid()))/1e6, float64(run.firstSightRSS)/1e6)
	waitMigrationsFinished(b, env)
	svm.profile(b, "first-sight")

	// The flip, and the wait for every CRD to be migrated and pruned.
	cpu0, err := processCPU(svm.pid())
	if err != nil {
		b.Fatal(err)
	}
	requests0, events0 := serverRequests(b, env), eventsByReason(b, env)
	flipped := time.Now()
	flipAll(b, env, rs)
	run.flipSent = time.Since(flipped)
	b.Logf("%d storage versions flipped to v2 in %s", n, run.flipSent.Round(time.Millisecond))
	limit := time.Duration(envInt("SVM_BENCH_CRD_TIMEOUT", 60)) * time.Minute
	profiled := svm.profileWork(b, env, flipped.Add(wait))
	run.done, run.stored, run.pruned = waitAllMigrated(b, env, rs, m, flipped, limit)
	profiled()
	cpu1, err := processCPU(svm.pid())
	if err != nil {
		b.Fatal(err)
	}
	run.cpu = cpu1 - cpu0
	run.requests = serverRequests(b, env)
	for k, v := range requests0 {
		run.requests[k] -= v
	}
	run.events = eventsByReason(b, env)
	for k, v := range events0 {
		run.events[k] -= v
	}
	svm.profile(b, "after-flip")
	sampler.stop()
	run.peakRSS, run.sampledRSS, run.anon = max(framework.PeakRSS(svm.pid()), sampler.peak()), sampler.peak(), sampler.peakAnon()
	run.inTree = countInTreeMigrations(b, env)
	after, moved := readManyObjects(b, env, rs)
	run.changed = compareManyObjects(b, before, after)
	b.Logf("%d managedFields entries name v2 after the migration", moved)
	svm.stop()
	b.Logf("%s: every CRD migrated and pruned %s after the flip (%d of %d pruned); svm peak RSS %.0f MB (VmHWM), %.0f MB sampled, %.0f MB of it its own (RssAnon); CPU %s; %d objects changed; %d in-tree migrations",
		mode.name, run.done.Round(time.Second), run.pruned, n, float64(run.peakRSS)/1e6, float64(run.sampledRSS)/1e6, float64(run.anon)/1e6, run.cpu.Round(time.Millisecond), run.changed, run.inTree)
	if run.changed > 0 {
		b.Errorf("%d objects changed content", run.changed)
	}
	return run
}

// createManyCRDs creates the CRDs of rs (v1 stored, v2 served, the same
// small schema) and waits until every one is served.
func createManyCRDs(b *testing.B, env *framework.Env, rs []framework.Resource) {
	b.Helper()
	ctx := framework.Context(b, 30*time.Minute)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, r := range rs {
		g.Go(func() error {
			if err := env.Client.Create(gctx, manyCRDObject(r)); err != nil {
				return fmt.Errorf("create CRD %s: %w", r.CRDName(), err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	// Served: in the discovery of its group version.
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, r := range rs {
		g.Go(func() error {
			for {
				list, err := env.Discovery.ServerResourcesForGroupVersion(r.Group + "/v1")
				if err == nil && slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == r.Plural }) {
					return nil
				}
				select {
				case <-gctx.Done():
					return fmt.Errorf("CRD %s not served: %w", r.CRDName(), gctx.Err())
				case <-time.After(200 * time.Millisecond):
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}

// manyCRDObject is r's CRD: namespaced, served in v1 and v2, stored in
// v1, with a small schema that keeps whatever spec holds.
func manyCRDObject(r framework.Resource) *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	schemaProps := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type:       "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", XPreserveUnknownFields: &preserve}},
	}}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: r.CRDName(), Labels: map[string]string{manyCRDsLabel: "true"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: r.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: r.Plural, Singular: strings.ToLower(r.Kind), Kind: r.Kind, ListKind: r.Kind + "List"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schemaProps},
				{Name: "v2", Served: true, Storage: false, Schema: schemaProps},
			},
		},
	}
}

// createManyObjects creates m objects of every resource of rs.
func createManyObjects(b *testing.B, env *framework.Env, rs []framework.Resource, m int) {
	b.Helper()
	g, ctx := errgroup.WithContext(framework.Context(b, 30*time.Minute))
	g.SetLimit(16)
	for i, r := range rs {
		for j := range m {
			g.Go(func() error {
				obj := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": r.Group + "/v1", "kind": r.Kind,
					"metadata": map[string]any{"name": fmt.Sprintf("thing-%04d", j), "labels": map[string]any{"crd": fmt.Sprint(i)}},
					"spec":     map[string]any{"crd": int64(i), "index": int64(j), "color": "blue", "size": "small", "tags": []any{"a", "b"}},
				}}
				_, err := env.Dynamic.Resource(r.GVR("v1")).Namespace(manyCRDsNamespace).Create(ctx, obj, metav1.CreateOptions{})
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		b.Fatalf("create objects: %v", err)
	}
}

// readManyObjects reads every object of rs in v1, without what a rewrite
// may change: resourceVersion, and the times and apiVersions of
// managedFields entries (svm moves the entries off a version it prunes
// from storedVersions); it counts the entries naming v2.
func readManyObjects(b *testing.B, env *framework.Env, rs []framework.Resource) (map[string]map[string]any, int) {
	b.Helper()
	var mu sync.Mutex
	out := map[string]map[string]any{}
	inV2 := 0
	g, ctx := errgroup.WithContext(framework.Context(b, 30*time.Minute))
	g.SetLimit(16)
	for _, r := range rs {
		g.Go(func() error {
			list, err := env.Dynamic.Resource(r.GVR("v1")).Namespace(manyCRDsNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			for _, item := range list.Items {
				obj := item.Object
				unstructured.RemoveNestedField(obj, "metadata", "resourceVersion")
				if mf, ok := obj["metadata"].(map[string]any)["managedFields"].([]any); ok {
					for _, e := range mf {
						entry := e.(map[string]any)
						if entry["apiVersion"] == r.Group+"/v2" {
							inV2++
						}
						delete(entry, "time")
						delete(entry, "apiVersion")
					}
				}
				out[r.Group+"/"+item.GetName()] = obj
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatalf("read objects: %v", err)
	}
	return out, inV2
}

// compareManyObjects counts the objects of before that after lacks or
// holds otherwise, and logs the first few.
func compareManyObjects(b *testing.B, before, after map[string]map[string]any) int {
	b.Helper()
	changed := 0
	for _, key := range slices.Sorted(maps.Keys(before)) {
		if reflect.DeepEqual(before[key], after[key]) {
			continue
		}
		if changed++; changed <= 3 {
			was, _ := json.Marshal(before[key])
			is, _ := json.Marshal(after[key])
			b.Logf("%s changed:\nbefore %s\nafter  %s", key, was, is)
		}
	}
	return changed + max(len(after)-len(before), 0)
}

// startControllerManager starts kube-controller-manager and waits until
// its garbage collector has listed every resource and it is quiet.
func startControllerManager(b *testing.B, env *framework.Env) {
	b.Helper()
	cp := env.CP
	var offset int64
	if fi, err := os.Stat(cp.ControllerManagerLog()); err == nil {
		offset = fi.Size()
	}
	ctx := framework.Context(b, 10*time.Minute)
	start := time.Now()
	if err := cp.StartControllerManager(ctx); err != nil {
		b.Fatalf("start kube-controller-manager: %v", err)
	}
	b.Cleanup(func() { _ = cp.StopControllerManager() })
	if err := waitLogLine(ctx, cp.ControllerManagerLog(), offset, gcSynced, gcNotSynced); err != nil {
		b.Fatalf("kube-controller-manager's garbage collector: %v", err)
	}
	if _, err := settle(cp.ControllerManagerPID(), settleLimit); err != nil {
		b.Fatal(err)
	}
	b.Logf("kube-controller-manager synced and quiet after %s", time.Since(start).Round(time.Second))
}

// manyCRDsController is svm controller at its defaults.
type manyCRDsController struct {
	cmd     *exec.Cmd
	started time.Time
	// metrics is the address of its metrics endpoint, where --profiling
	// serves the profiles; profiles is where they are saved ("" for none).
	metrics, profiles, prefix string
	once                      sync.Once
}

// startManyCRDsController starts svm controller at its defaults, but for
// its endpoints' addresses (the metrics endpoint serves the profiles
// with SVM_BENCH_PROFILE_DIR) and the lease's namespace, with GOMEMLIMIT
// and GOGC as the shipped chart sets them.
func startManyCRDsController(b *testing.B, env *framework.Env, mode manyCRDsMode) *manyCRDsController {
	b.Helper()
	c := &manyCRDsController{profiles: os.Getenv("SVM_BENCH_PROFILE_DIR"), metrics: "0",
		prefix: fmt.Sprintf("%s-%d", mode.name, envInt("SVM_BENCH_CRDS", 1000))}
	c.start(b, env, cmp.Or(os.Getenv("SVM_BENCH_CRDS_SVM"), svmBinary))
	return c
}

// start starts binary as svm controller at its defaults, as
// startManyCRDsController says, logging to <prefix>-svm-controller.log (in
// the profiles' directory when there is one); a metrics address of "0"
// becomes a free one when profiles are asked for.
func (c *manyCRDsController) start(b *testing.B, env *framework.Env, binary string) {
	b.Helper()
	dir := b.TempDir()
	kubeconfig := filepath.Join(dir, "svm.kubeconfig")
	if err := env.CP.WriteKubeconfig(kubeconfig); err != nil {
		b.Fatal(err)
	}
	args := []string{"controller", "--kubeconfig", kubeconfig, "--leader-election-namespace", "default", "--health-probe-bind-address", "0"}
	logDir := dir
	if c.profiles != "" {
		if err := os.MkdirAll(c.profiles, 0o755); err != nil {
			b.Fatal(err)
		}
		logDir = c.profiles
		if c.metrics == "0" {
			c.metrics = framework.FreeAddress(b)
		}
		args = append(args, "--profiling")
	}
	args = append(args, "--metrics-bind-address", c.metrics)
	log, err := os.Create(filepath.Join(logDir, c.prefix+"-svm-controller.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = log.Close() })
	c.cmd = exec.Command(binary, args...)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	c.cmd.Env = shippedEnv()
	if err := c.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c.started = time.Now()
	b.Cleanup(c.stop)
}

func (c *manyCRDsController) pid() int { return c.cmd.Process.Pid }

func (c *manyCRDsController) stop() { c.once.Do(func() { stopProcess(c.cmd, 30*time.Second) }) }

// profile saves svm's heap profile, after a GC, and its goroutines, as
// <prefix>-<stage>.heap and .goroutines, when profiles are asked for.
func (c *manyCRDsController) profile(b *testing.B, stage string) {
	b.Helper()
	if c.profiles == "" {
		return
	}
	for path, file := range map[string]string{"/debug/pprof/heap?gc=1": ".heap", "/debug/pprof/goroutine?debug=1": ".goroutines"} {
		code, body := framework.Get(b, c.metrics, path)
		if code != http.StatusOK {
			b.Fatalf("GET %s from svm: %d", path, code)
		}
		if err := os.WriteFile(filepath.Join(c.profiles, c.prefix+"-"+stage+file), body, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("profiles of %s saved in %s", stage, c.profiles)
}

// profileWork, with profiles asked for, takes CPU profiles of the API
// server and of svm over the minute from from on (the migrations' work,
// once svm's settle-and-drain wait is over) and saves them; the returned
// function waits for them.
func (c *manyCRDsController) profileWork(b *testing.B, env *framework.Env, from time.Time) func() {
	b.Helper()
	if c.profiles == "" {
		return func() {}
	}
	ctx := framework.Context(b, time.Until(from)+3*time.Minute)
	var g errgroup.Group
	save := func(name string, get func() ([]byte, error)) {
		g.Go(func() error {
			select {
			case <-time.After(time.Until(from)):
			case <-ctx.Done():
				return ctx.Err()
			}
			raw, err := get()
			if err != nil {
				return fmt.Errorf("CPU profile of %s: %w", name, err)
			}
			return os.WriteFile(filepath.Join(c.profiles, c.prefix+"-"+name+".cpu"), raw, 0o644)
		})
	}
	save("apiserver", func() ([]byte, error) {
		return env.Kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "60").DoRaw(ctx)
	})
	save("svm", func() ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.metrics+"/debug/pprof/profile?seconds=60", nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET from svm: %s", resp.Status)
		}
		return io.ReadAll(resp.Body)
	})
	return func() {
		if err := g.Wait(); err != nil {
			b.Error(err)
		}
	}
}

// rssSampler samples a process's VmRSS and RssAnon every 100 ms until
// stopped.
type rssSampler struct {
	max    atomic.Int64
	anon   atomic.Int64
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func (c *manyCRDsController) sampleRSS() *rssSampler {
	s := &rssSampler{}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.done.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			s.max.Store(max(s.max.Load(), framework.RSS(c.pid())))
			s.anon.Store(max(s.anon.Load(), rssAnon(c.pid())))
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return s
}

func (s *rssSampler) peak() int64 { return s.max.Load() }

func (s *rssSampler) peakAnon() int64 { return s.anon.Load() }

// rssAnon is the anonymous resident memory of process pid in bytes
// (RssAnon), 0 once it is gone.
func rssAnon(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

func (s *rssSampler) stop() {
	s.cancel()
	s.done.Wait()
}

// waitFirstSight waits until svm has a StorageState of every resource of
// rs (seen), and each records its objects as migrated to v1 (firstSight),
// both counted from since. It reads them from a watch.
func waitFirstSight(b *testing.B, env *framework.Env, rs []framework.Resource, since time.Time) (seen, firstSight time.Duration) {
	b.Helper()
	want := map[string]string{}
	for _, r := range rs {
		want[migrationv1alpha1.StorageStateName(migrationv1alpha1.GroupResource{Group: r.Group, Resource: r.Plural})] = resources.StorageVersionHash(r.Group, "v1", r.Kind)
	}
	states := watchAll[*migrationv1alpha1.StorageState](b, env, &migrationv1alpha1.StorageStateList{}, "")
	defer states.stop()
	ctx := framework.Context(b, time.Duration(envInt("SVM_BENCH_CRD_TIMEOUT", 60))*time.Minute)
	last := time.Now()
	for {
		present, err := states.count(func(s *migrationv1alpha1.StorageState) bool { return want[s.Name] != "" })
		if err != nil {
			b.Fatalf("watch StorageStates: %v", err)
		}
		migrated, _ := states.count(func(s *migrationv1alpha1.StorageState) bool {
			hash := want[s.Name]
			return hash != "" && slices.Equal(s.Status.PersistedStorageVersionHashes, []string{hash}) && s.Status.CurrentStorageVersionHash == hash
		})
		if seen == 0 && present == len(rs) {
			seen = time.Since(since)
		}
		if migrated == len(rs) {
			return seen, time.Since(since)
		}
		if time.Since(last) >= 30*time.Second {
			last = time.Now()
			b.Logf("first sight after %s: %d of %d StorageStates, %d of them migrated", time.Since(since).Round(time.Second), present, len(rs), migrated)
		}
		select {
		case <-ctx.Done():
			b.Fatalf("first sight: %d of %d StorageStates, %d migrated: %v", present, len(rs), migrated, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// unfinished is a migration that has neither succeeded nor failed.
func unfinished(m *migrationv1alpha1.StorageVersionMigration) bool {
	return !m.HasCondition(migrationv1alpha1.MigrationSucceeded) && !m.HasCondition(migrationv1alpha1.MigrationFailed)
}

// waitMigrationsFinished waits, up to ten minutes, until none of svm's
// migrations is unfinished: the first-sight migrations of built-in
// resources are not to run during the measured pass.
func waitMigrationsFinished(b *testing.B, env *framework.Env) {
	b.Helper()
	migrations := watchAll[*migrationv1alpha1.StorageVersionMigration](b, env, &migrationv1alpha1.StorageVersionMigrationList{}, "")
	defer migrations.stop()
	ctx := framework.Context(b, 10*time.Minute)
	for {
		m, found := migrations.find(unfinished)
		if !found {
			return
		}
		select {
		case <-ctx.Done():
			n, _ := migrations.count(unfinished)
			b.Logf("%d migrations still unfinished (%s among them); flipping anyway", n, m.Name)
			return
		case <-time.After(time.Second):
		}
	}
}

// flipAll makes v2 the storage version of every CRD of rs, 32 requests
// at a time, one JSON patch each.
func flipAll(b *testing.B, env *framework.Env, rs []framework.Resource) {
	b.Helper()
	patch := client.RawPatch(types.JSONPatchType, []byte(`[`+
		`{"op":"test","path":"/spec/versions/1/name","value":"v2"},`+
		`{"op":"replace","path":"/spec/versions/0/storage","value":false},`+
		`{"op":"replace","path":"/spec/versions/1/storage","value":true}]`))
	g, ctx := errgroup.WithContext(framework.Context(b, 10*time.Minute))
	g.SetLimit(32)
	for _, r := range rs {
		g.Go(func() error {
			crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: r.CRDName()}}
			return env.Client.Patch(ctx, crd, patch)
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatalf("flip: %v", err)
	}
}

// waitAllMigrated waits until every CRD of rs has storedVersions [v2] and
// etcd holds each of their m objects in v2. It returns when each was
// first seen, counted from since: done when both held, stored when etcd
// held every object in v2 (0 when not within limit), and how many CRDs
// were pruned to [v2] at the last look. It stops waiting early once etcd
// holds every object in v2, none of svm's migrations is unfinished and no
// CRD has been pruned for a minute: a prune that is never retried. CRDs
// and migrations are read from watches, etcd every 5 seconds.
func waitAllMigrated(b *testing.B, env *framework.Env, rs []framework.Resource, m int, since time.Time, limit time.Duration) (done, stored time.Duration, pruned int) {
	b.Helper()
	crds := watchAll[*apiextensionsv1.CustomResourceDefinition](b, env, &apiextensionsv1.CustomResourceDefinitionList{}, manyCRDsLabel)
	defer crds.stop()
	migrations := watchAll[*migrationv1alpha1.StorageVersionMigration](b, env, &migrationv1alpha1.StorageVersionMigrationList{}, "")
	defer migrations.stop()
	ctx := framework.Context(b, limit+time.Minute)
	last, lastEtcd, lastPrune, before := time.Now(), time.Time{}, time.Now(), 0
	for {
		var err error
		pruned, err = crds.count(func(crd *apiextensionsv1.CustomResourceDefinition) bool {
			return slices.Equal(crd.Status.StoredVersions, []string{"v2"})
		})
		if err != nil {
			b.Fatalf("watch CRDs: %v", err)
		}
		if pruned != before {
			before, lastPrune = pruned, time.Now()
		}
		at := time.Since(since)
		if stored == 0 && (pruned == len(rs) || time.Since(lastEtcd) >= 5*time.Second) {
			lastEtcd = time.Now()
			counts, err := manyStoredVersions(ctx, env, rs)
			if err != nil {
				b.Fatal(err)
			}
			if counts["v2"] == len(rs)*m && len(counts) == 1 {
				stored = at
				b.Logf("etcd holds every object in v2 %s after the flip; %d of %d CRDs pruned to [v2]", at.Round(time.Second), pruned, len(rs))
			} else if pruned == len(rs) {
				b.Logf("every CRD pruned to [v2] after %s, but etcd holds %v", at.Round(time.Second), counts)
			}
		}
		if stored > 0 && pruned == len(rs) {
			return at, stored, pruned
		}
		if _, running := migrations.find(unfinished); stored > 0 && time.Since(lastPrune) >= time.Minute && !running {
			b.Errorf("etcd holds every object in v2 and svm's migrations are finished, but only %d of %d CRDs are pruned to [v2], none more for a minute", pruned, len(rs))
			return 0, stored, pruned
		}
		if time.Since(last) >= 30*time.Second {
			last = time.Now()
			b.Logf("%s after the flip: %d of %d CRDs pruned to [v2]", at.Round(time.Second), pruned, len(rs))
		}
		if at > limit {
			b.Errorf("not every CRD migrated within %s of the flip: %d of %d pruned to [v2]", limit, pruned, len(rs))
			return 0, stored, pruned
		}
		select {
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// manyStoredVersions counts the objects of rs in etcd by the version they
// are stored in.
func manyStoredVersions(ctx context.Context, env *framework.Env, rs []framework.Resource) (map[string]int, error) {
	var mu sync.Mutex
	counts := map[string]int{}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, r := range rs {
		g.Go(func() error {
			resp, err := env.Etcd.Get(ctx, r.EtcdPrefix(), clientv3.WithPrefix())
			if err != nil {
				return fmt.Errorf("read etcd %s: %w", r.EtcdPrefix(), err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, kv := range resp.Kvs {
				v, err := etcdvalue.Inspect(kv.Value)
				if err != nil {
					return fmt.Errorf("etcd value %s: %w", kv.Key, err)
				}
				version := strings.TrimPrefix(v.APIVersion, r.Group+"/")
				counts[version]++
			}
			return nil
		})
	}
	return counts, g.Wait()
}

// countInTreeMigrations counts kube-controller-manager's migrations (svm
// creates one for each of its migrations it hands over).
func countInTreeMigrations(b *testing.B, env *framework.Env) int {
	b.Helper()
	list, err := env.Dynamic.Resource(schema.GroupVersionResource{Group: "storagemigration.k8s.io", Version: "v1", Resource: "storageversionmigrations"}).
		List(framework.Context(b, time.Minute), metav1.ListOptions{})
	if err != nil {
		return 0 // not served
	}
	return len(list.Items)
}

// strategy names the part in the table.
func (r manyCRDsRun) strategy() string {
	if r.mode.controllerManager {
		return "svm controller (defaults: --executor=auto, kube-controller-manager running; " + shippedRuntime + ")"
	}
	return "svm controller (defaults, svm's engine alone; " + shippedRuntime + ")"
}

func (r manyCRDsRun) workload() string {
	return fmt.Sprintf("%d CRDs × %d objects, every storage version flipped at once", r.crds, r.objects)
}

// result is the part as a row of the table: its rate counts from the flip
// to the last CRD pruned.
func (r manyCRDsRun) result() result {
	wall := r.done
	if wall == 0 {
		wall = time.Duration(1<<63 - 1)
	}
	return result{workload: r.workload(), strategy: r.strategy(), objects: r.crds * r.objects, passes: []passFigures{{
		wall:  wall,
		usage: usage{cpu: r.cpu, peakRSS: r.peakRSS, process: true},
	}}}
}

func (r manyCRDsRun) targets() []target {
	bound, within := r.settleAndDrain+manyCRDsExtraWait, "svm's settle-and-drain wait plus 120 s"
	if r.mode.controllerManager {
		// With kube-controller-manager, whose migrator waits for its
		// garbage collector's cache before each migration, the target
		// is twice the engine's time.
		bound, within = 2*bound, "twice svm's settle-and-drain wait plus 120 s"
	}
	done := "not done"
	if r.done > 0 {
		done = fmt.Sprintf("%.0f s", r.done.Seconds())
	}
	return []target{{
		what: fmt.Sprintf("%s, %s: every CRD's storedVersions [v2] and every object stored in v2 within %s (%.0f s)",
			r.workload(), r.mode.name, within, bound.Seconds()),
		measured: fmt.Sprintf("%s (%d of %d pruned)", done, r.pruned, r.crds),
		met:      r.done > 0 && r.done <= bound,
	}, {
		what:     fmt.Sprintf("%s, %s: svm's peak RSS under %.0f MB", r.workload(), r.mode.name, manyCRDsMemoryTarget/1e6),
		measured: fmt.Sprintf("%.0f MB", float64(r.peakRSS)/1e6),
		met:      r.peakRSS < manyCRDsMemoryTarget,
	}, {
		what:     fmt.Sprintf("%s, %s: every object's content unchanged", r.workload(), r.mode.name),
		measured: fmt.Sprintf("%d of %d changed", r.changed, r.crds*r.objects),
		met:      r.changed == 0,
	}}
}

// manyCRDsNote is the parts as a table of their own: where the time went
// and svm's memory.
func manyCRDsNote(runs []manyCRDsRun) string {
	var sb strings.Builder
	sb.WriteString("Many CRDs flipped at once (svm controller at its defaults, one pass per part; times of first sight from svm's start, of the migrations from the first flip sent):\n\n")
	sb.WriteString("| CRDs | objects each | part | StorageState of every CRD | first-sight migrations done | svm peak RSS until then (of it RssAnon) | flips sent in | etcd all v2 | every CRD pruned to [v2], etcd all v2 | settle and drain + 120 s | svm peak RSS (VmHWM) | of it svm's own (peak RssAnon) | svm CPU after the flip | in-tree migrations at the end |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		done := fmt.Sprintf("not done (%d pruned)", r.pruned)
		if r.done > 0 {
			done = fmt.Sprintf("%.0f s", r.done.Seconds())
		}
		stored := "not within the limit"
		if r.stored > 0 {
			stored = fmt.Sprintf("%.0f s", r.stored.Seconds())
		}
		fmt.Fprintf(&sb, "| %d | %d | %s | %.0f s | %.0f s | %.0f MB (%.0f MB) | %.1f s | %s | %s | %.0f s | %.0f MB | %.0f MB | %.1f s | %d |\n",
			r.crds, r.objects, r.mode.name, r.seen.Seconds(), r.firstSight.Seconds(), float64(r.firstSightRSS)/1e6, float64(r.firstSightAnon)/1e6,
			r.flipSent.Seconds(), stored, done, (r.settleAndDrain + manyCRDsExtraWait).Seconds(), float64(cmp.Or(r.peakRSS, r.sampledRSS))/1e6,
			float64(r.anon)/1e6, r.cpu.Seconds(), r.inTree)
	}
	for _, r := range runs {
		fmt.Fprintf(&sb, "\n%s: requests the API server answered from the flip to the end, per CRD (the benchmark's flips and polls among them): %s.\n", r.mode.name, requestsPer(r.requests, r.crds, 14))
		fmt.Fprintf(&sb, "%s: Events from the flip to the end, per CRD: %s.\n", r.mode.name, requestsPer(r.events, r.crds, 12))
	}
	return sb.String()
}

// eventsByReason counts the events.k8s.io Events in every namespace by
// the kind of object they regard and their reason.
func eventsByReason(b *testing.B, env *framework.Env) map[string]float64 {
	b.Helper()
	list, err := env.Kube.EventsV1().Events(metav1.NamespaceAll).List(framework.Context(b, time.Minute), metav1.ListOptions{})
	if err != nil {
		b.Fatalf("list events: %v", err)
	}
	out := map[string]float64{}
	for _, ev := range list.Items {
		out[ev.Regarding.Kind+" "+ev.Reason]++
	}
	return out
}
