package bench

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// result is what one strategy did on one workload: one pass, or one per
// round when strategies are compared.
type result struct {
	workload, strategy string
	objects            int
	passes             []passFigures
}

// passFigures are one pass's measurements.
type passFigures struct {
	wall      time.Duration
	serverCPU time.Duration
	// serverRSS is the API server's highest resident set sampled during
	// the pass.
	serverRSS int64
	usage     usage
	requests  int // LIST, PATCH and PUT of the resource, as the API server counted them
	churned   int // requests another client sent to the resource meanwhile
}

// rates are the objects per second of every pass.
func (r result) rates() []float64 {
	out := make([]float64, len(r.passes))
	for i, p := range r.passes {
		out[i] = float64(r.objects) / p.wall.Seconds()
	}
	return out
}

// rate is the median of the passes' objects per second.
func (r result) rate() float64 { return median(r.rates()) }

// serverCPU is the median API server CPU per object, in milliseconds.
func (r result) serverCPU() float64 {
	return r.perObject(func(p passFigures) float64 { return ms(p.serverCPU) })
}

// svmCPU is the median CPU per object of the migrating process (svm, or
// kube-controller-manager during an in-tree pass), in milliseconds.
func (r result) svmCPU() float64 {
	return r.perObject(func(p passFigures) float64 { return ms(p.usage.cpu) })
}

// requestsPerObject is the median of the requests sent per object.
func (r result) requestsPerObject() float64 {
	return r.perObject(func(p passFigures) float64 { return float64(p.requests) })
}

// requestRate is the median of the requests sent per second.
func (r result) requestRate() float64 {
	out := make([]float64, len(r.passes))
	for i, p := range r.passes {
		out[i] = float64(p.requests) / p.wall.Seconds()
	}
	return median(out)
}

func (r result) perObject(f func(passFigures) float64) float64 {
	out := make([]float64, len(r.passes))
	for i, p := range r.passes {
		out[i] = f(p) / float64(r.objects)
	}
	return median(out)
}

// peakRSS is the highest peak resident set of the migrating process over
// the passes.
func (r result) peakRSS() int64 {
	var peak int64
	for _, p := range r.passes {
		peak = max(peak, p.usage.peakRSS)
	}
	return peak
}

// skipped is the median of the objects svm found written by others and
// skipped without a write.
func (r result) skipped() int {
	out := make([]float64, len(r.passes))
	for i, p := range r.passes {
		out[i] = float64(p.usage.skipped)
	}
	return int(median(out))
}

func (r result) process() bool { return len(r.passes) > 0 && r.passes[0].usage.process }

// counted says the migrator reported the objects it skipped.
func (r result) counted() bool { return len(r.passes) > 0 && r.passes[0].usage.counted }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// target is one of the performance targets and how this run did.
type target struct {
	what, measured string
	met            bool
	// unjudged, when set, is why this run cannot judge the target (a
	// strategy it needs did not run, too few reads): the table says so
	// instead of whether it was met.
	unjudged string
}

// verdict is what the targets table says of t: yes, no, or why the run
// could not judge it.
func (t target) verdict() string {
	switch {
	case t.unjudged != "":
		return t.unjudged
	case t.met:
		return "yes"
	default:
		return "no"
	}
}

// writeResults writes the run's table, with the machine it ran on and the
// targets judged from it, to $SVM_BENCH_RESULTS (default
// _output/benchmarks.md at the repository root), to be copied into
// docs/benchmarks.md.
func writeResults(b *testing.B, results []result, notes []string, targets []target) {
	b.Helper()
	path := os.Getenv("SVM_BENCH_RESULTS")
	if path == "" {
		path = filepath.Join("..", "..", "_output", "benchmarks.md")
	}
	ceiling, naive1 := baselines(results)
	var sb strings.Builder
	fmt.Fprintf(&sb, "Run of %s on %s.\n\n", time.Now().UTC().Format("2006-01-02"), machine())
	sb.WriteString("| workload | strategy | objects | objects/s (median) | of ceiling | x naive (1 worker) | API server CPU ms/object | migrator CPU ms/object | migrator peak RSS | requests/object | found rewritten by others | objects/s of each pass |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		ofCeiling, xNaive, svmCPU, rss, skipped := "", "", "", "", ""
		if c := ceiling[r.workload]; c > 0 {
			ofCeiling = fmt.Sprintf("%.2f", r.rate()/c)
		}
		if n := naive1[r.workload]; n > 0 {
			xNaive = fmt.Sprintf("%.2f", r.rate()/n)
		}
		if r.process() {
			svmCPU = fmt.Sprintf("%.3f", r.svmCPU())
			rss = fmt.Sprintf("%.0f MB", float64(r.peakRSS())/1e6)
		}
		if r.counted() {
			skipped = fmt.Sprint(r.skipped())
		}
		each := make([]string, 0, len(r.passes))
		for _, rate := range r.rates() {
			each = append(each, fmt.Sprintf("%.0f", rate))
		}
		fmt.Fprintf(&sb, "| %s | %s | %d | %.0f | %s | %s | %.2f | %s | %s | %.2f | %s | %s |\n",
			r.workload, r.strategy, r.objects, r.rate(), ofCeiling, xNaive, r.serverCPU(), svmCPU, rss,
			r.requestsPerObject(), skipped, strings.Join(each, " / "))
	}
	for _, workload := range slices.Sorted(maps.Keys(ceiling)) {
		notes = append(notes, fmt.Sprintf("Ceiling for %s: %.0f objects/s, the best median of the ceiling search.", workload, ceiling[workload]))
	}
	if len(notes) > 0 {
		sb.WriteString("\n")
		for _, n := range notes {
			fmt.Fprintf(&sb, "- %s\n", n)
		}
	}
	sb.WriteString("\n| target | measured (medians of this run, unless the row says otherwise) | met |\n|---|---|---|\n")
	for _, t := range targets {
		fmt.Fprintf(&sb, "| %s | %s | %s |\n", t.what, t.measured, t.verdict())
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("results in %s:\n%s", path, sb.String())
}

// baselines are, per workload, the ceiling (the best median rate of the
// ceiling search) and the 1-worker naive baseline's median rate.
func baselines(results []result) (ceiling, naive1 map[string]float64) {
	ceiling, naive1 = map[string]float64{}, map[string]float64{}
	for _, r := range results {
		if strings.HasPrefix(r.strategy, "ceiling search") {
			ceiling[r.workload] = max(ceiling[r.workload], r.rate())
		}
		if r.strategy == naive(1).name {
			naive1[r.workload] = r.rate()
		}
	}
	return ceiling, naive1
}

// Bounds of the compared workloads' targets that the suite's decisions
// rest on.
const (
	// pacerShare is the share of svm unthrottled's rate that svm at its
	// defaults must make: what adaptive pacing may cost on an idle server.
	pacerShare = 0.95
	// patchCPUFactor is how many times the naive Update loop's API server
	// CPU per object (8 workers) svm's may be: what the merge patch, which
	// keeps the fields a lagging server never listed, may cost.
	patchCPUFactor = 1.2
)

// Names of the compared strategies in the targets table.
const (
	labelDefaults    = "svm (defaults)"
	labelUnthrottled = "svm unthrottled"
	labelCeiling     = "the ceiling search"
	labelNaive1      = "the naive loop with 1 worker"
	labelNaive8      = "the naive loop with 8 workers"
	labelInTree      = "the in-tree migrator"
)

// speedTargets judges the compared workloads, in the order workloads
// lists them: svm at its defaults and unthrottled against the ceiling, the
// naive loops and the in-tree migrator, in speed and in API server CPU,
// from the medians of the rounds. A target needing a strategy that did not
// run (SVM_BENCH_ONLY left it out) says which instead of a verdict.
func speedTargets(results []result, workloads []string) []target {
	ceiling, naive1 := baselines(results)
	var out []target
	for _, workload := range workloads {
		find := func(strategy string) (result, bool) {
			i := slices.IndexFunc(results, func(r result) bool {
				return r.workload == workload && r.strategy == strategy && len(r.passes) > 0
			})
			if i < 0 {
				return result{}, false
			}
			return results[i], true
		}
		defaults, okDefaults := find(defaultsName)
		svm, okUnthrottled := find(unthrottledName)
		n1, okNaive1 := find(naive(1).name)
		n8, okNaive8 := find(naive(8).name)
		it, okInTree := find(inTreeName)
		c := ceiling[workload]
		ran := map[string]bool{
			labelDefaults: okDefaults, labelUnthrottled: okUnthrottled, labelCeiling: c > 0,
			labelNaive1: okNaive1, labelNaive8: okNaive8, labelInTree: okInTree,
		}
		// judged is t, or t unjudged when a strategy it needs did not run;
		// measured is only called when they all did.
		judged := func(what string, measured func() (string, bool), needs ...string) target {
			t := target{what: fmt.Sprintf("%s: %s", workload, what)}
			if t.unjudged = notRun(ran, needs...); t.unjudged != "" {
				t.measured = "-"
				return t
			}
			t.measured, t.met = measured()
			return t
		}
		out = append(out,
			judged("svm at its defaults (adaptive pacing) at 0.9 of the ceiling on an idle server", func() (string, bool) {
				return fmt.Sprintf("%.0f / %.0f objects/s = %.2f", defaults.rate(), c, defaults.rate()/c), defaults.rate() >= 0.9*c
			}, labelDefaults, labelCeiling),
			judged(fmt.Sprintf("the pacer's cost: svm at its defaults at %.2fx svm unthrottled (--workers 256 --adaptive-pacing=false) and no slower than the naive Update loop with 8 workers", pacerShare), func() (string, bool) {
				share := defaults.rate() / svm.rate()
				return fmt.Sprintf("%.0f / %.0f objects/s unthrottled = %.2fx; the naive loop %.0f objects/s (%d, %d and %d rounds)",
						defaults.rate(), svm.rate(), share, n8.rate(), len(defaults.passes), len(svm.passes), len(n8.passes)),
					share >= pacerShare && defaults.rate() >= n8.rate()
			}, labelDefaults, labelUnthrottled, labelNaive8),
			judged("the merge patch's cost: svm at its defaults at no more API server CPU per object than the in-tree migrator", func() (string, bool) {
				return fmt.Sprintf("%.2f against %.2f ms/object", defaults.serverCPU(), it.serverCPU()), defaults.serverCPU() <= it.serverCPU()
			}, labelDefaults, labelInTree),
			judged(fmt.Sprintf("the merge patch's cost: svm at its defaults at no more than %.1fx the API server CPU per object of the naive Update loop with 8 workers", patchCPUFactor), func() (string, bool) {
				return fmt.Sprintf("%.2f / %.2f ms/object = %.2fx", defaults.serverCPU(), n8.serverCPU(), defaults.serverCPU()/n8.serverCPU()),
					defaults.serverCPU() <= patchCPUFactor*n8.serverCPU()
			}, labelDefaults, labelNaive8),
			judged("svm unthrottled at 0.95 of the ceiling", func() (string, bool) {
				return fmt.Sprintf("%.0f / %.0f objects/s = %.2f", svm.rate(), c, svm.rate()/c), svm.rate() >= 0.95*c
			}, labelUnthrottled, labelCeiling),
			judged("svm unthrottled at 2x the naive baseline with 1 worker", func() (string, bool) {
				return fmt.Sprintf("%.0f / %.0f objects/s = %.2fx", svm.rate(), naive1[workload], svm.rate()/naive1[workload]), svm.rate() >= 2*naive1[workload]
			}, labelUnthrottled, labelNaive1),
			judged("svm unthrottled at no more API server CPU per object than the naive loop", func() (string, bool) {
				return fmt.Sprintf("svm %.2f ms, naive %.2f ms (1 worker), %.2f ms (8 workers)", svm.serverCPU(), n1.serverCPU(), n8.serverCPU()),
					svm.serverCPU() <= min(n1.serverCPU(), n8.serverCPU())
			}, labelUnthrottled, labelNaive1, labelNaive8),
		)
	}
	return out
}

// notRun is "not run: " followed by those of needs that ran marks as not
// run, or "" when they all ran.
func notRun(ran map[string]bool, needs ...string) string {
	var missing []string
	for _, name := range needs {
		if !ran[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return "not run: " + strings.Join(missing, ", ")
}

// machine describes the CPU, cores and memory the run had.
func machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB of memory", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%d cores (%s)%s, %s/%s, %s; the API server, etcd, svm (or kube-controller-manager) and the benchmark share them",
		runtime.NumCPU(), model, mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// scalingNote is the scaling series as a table of its own: the rate, the
// API server's CPU and memory, and svm's memory at each size.
func scalingNote(series []result) string {
	var b strings.Builder
	b.WriteString("Scaling series (svm at its defaults, one pass per size):\n\n")
	b.WriteString("| objects | time | objects/s | API server CPU ms/object | API server peak RSS during the pass | svm peak RSS |\n|---|---|---|---|---|---|\n")
	for _, r := range series {
		var serverRSS int64
		var wall time.Duration
		for _, p := range r.passes {
			serverRSS = max(serverRSS, p.serverRSS)
			wall += p.wall
		}
		fmt.Fprintf(&b, "| %d | %s | %.0f | %.2f | %.0f MB | %.0f MB |\n", r.objects, wall.Round(time.Second), r.rate(), r.serverCPU(), float64(serverRSS)/1e6, float64(r.peakRSS())/1e6)
	}
	return b.String()
}
