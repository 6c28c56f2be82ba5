package bench

import (
	"strings"
	"testing"
	"time"
)

// reads are n reads of latency d.
func reads(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestReadPoolPoolsTheRounds(t *testing.T) {
	// A round of 100 reads with 2 slow ones has its p99 among them; pooled
	// with a round of 100 fast reads, the 2 slow ones are 1% of the reads
	// and the p99 is a fast one.
	slowRound := append(reads(98, time.Millisecond), reads(2, 50*time.Millisecond)...)
	fastRound := reads(100, time.Millisecond)
	if got := percentile(slowRound, 99); got != 50*time.Millisecond {
		t.Fatalf("the slow round's own p99 = %s, want 50ms", got)
	}
	p := &readPool{}
	p.add(100, reads(600, time.Millisecond), slowRound).add(120, reads(600, 2*time.Millisecond), fastRound)
	if p.passes != 2 || len(p.during) != 200 || len(p.idle) != 1200 {
		t.Fatalf("pool of %d passes, %d reads, %d idle reads; want 2, 200, 1200", p.passes, len(p.during), len(p.idle))
	}
	if got := p.p99(); got != time.Millisecond {
		t.Errorf("pooled p99 = %s, want 1ms", got)
	}
	// A third slow read is over 1% of 200: the p99 is slow.
	p.add(110, nil, []time.Duration{50 * time.Millisecond})
	if got := p.p99(); got != 50*time.Millisecond {
		t.Errorf("pooled p99 with 3 slow reads of 201 = %s, want 50ms", got)
	}
}

// pricePools is a price at one rate whose svm and in-tree reads are n
// each, of p99 svmP99 and inTreeP99, over 3 rounds.
func pricePools(n int, svmP99, inTreeP99 time.Duration) *atRatePrice {
	a := &atRatePrice{}
	for range 3 {
		a.inTree = a.pool(inTreeName).add(150, reads(600, 2*time.Millisecond), reads(n/3, inTreeP99))
		a.svm = a.pool("svm"+atItsRate).add(140, reads(600, 2*time.Millisecond), reads(n/3, svmP99))
	}
	return a
}

func TestPriceTarget(t *testing.T) {
	for _, tc := range []struct {
		name  string
		price *atRatePrice
		want  string
	}{
		{"met", pricePools(3000, 11*time.Millisecond, 10*time.Millisecond), "yes"},
		{"not met", pricePools(3000, 12*time.Millisecond, 10*time.Millisecond), "no"},
		{"svm cheaper, too few reads", pricePools(2997, 5*time.Millisecond, 10*time.Millisecond), "not enough reads"},
		{"part not run", nil, "not run: price-at-one-rate"},
		{"in-tree migrator left out", func() *atRatePrice {
			a := pricePools(3000, time.Millisecond, time.Millisecond)
			a.inTree = nil
			return a
		}(), "not run: " + labelInTree},
		{"svm's defaults not among the flag sets", func() *atRatePrice {
			a := pricePools(3000, time.Millisecond, time.Millisecond)
			a.svm = nil
			return a
		}(), "not run: " + labelDefaults + " at that rate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := priceTarget(tc.price)
			if v := got.verdict(); v != tc.want {
				t.Errorf("verdict %q, want %q (measured %q)", v, tc.want, got.measured)
			}
			if got.unjudged != "" && got.met {
				t.Errorf("unjudged target counted as met")
			}
		})
	}
	got := priceTarget(pricePools(3000, 11*time.Millisecond, 10*time.Millisecond))
	for _, want := range []string{"p99 11ms beside svm (3000 reads in 3 passes", "10ms beside the in-tree migrator (3000 reads in 3 passes", "= 1.10x", "idle p99 2ms (3600 reads)"} {
		if !strings.Contains(got.measured, want) {
			t.Errorf("measured %q, want it to contain %q", got.measured, want)
		}
	}
}

// compared is a result of one pass per rate of rates, at cpu API server
// ms per object.
func compared(workload, strategy string, cpu float64, rates ...float64) result {
	r := result{workload: workload, strategy: strategy, objects: 1000}
	for _, rate := range rates {
		r.passes = append(r.passes, passFigures{
			wall:      time.Duration(float64(r.objects) / rate * float64(time.Second)),
			serverCPU: time.Duration(cpu * float64(r.objects) * float64(time.Millisecond)),
		})
	}
	return r
}

func TestSpeedTargets(t *testing.T) {
	const w = "custom resources after a storage flip"
	all := []result{
		compared(w, ceilingName(64), 5.5, 300, 310, 290),
		compared(w, defaultsName, 6.0, 290, 250, 285),
		compared(w, unthrottledName, 5.6, 295, 290, 300),
		compared(w, naive(1).name, 8.0, 120, 118, 119),
		compared(w, naive(8).name, 5.1, 220, 260, 230),
		compared(w, inTreeName, 10.0, 37, 38, 36),
	}
	verdicts := func(results []result) map[string]string {
		out := map[string]string{}
		for _, tg := range speedTargets(results, []string{w}) {
			if !strings.HasPrefix(tg.what, w+": ") {
				t.Errorf("target %q does not name its workload", tg.what)
			}
			if tg.unjudged != "" && tg.met {
				t.Errorf("%q: unjudged and met", tg.what)
			}
			out[strings.TrimPrefix(tg.what, w+": ")] = tg.verdict()
		}
		return out
	}
	pacer := "the pacer's cost: svm at its defaults at 0.95x svm unthrottled (--workers 256 --adaptive-pacing=false) and no slower than the naive Update loop with 8 workers"
	cpuInTree := "the merge patch's cost: svm at its defaults at no more API server CPU per object than the in-tree migrator"
	cpuNaive := "the merge patch's cost: svm at its defaults at no more than 1.2x the API server CPU per object of the naive Update loop with 8 workers"
	ofCeiling := "svm at its defaults (adaptive pacing) at 0.9 of the ceiling on an idle server"

	got := verdicts(all)
	// Medians: defaults 285, unthrottled 295 (0.97x), naive 8 230, the
	// ceiling 300; API server CPU 6.0 against 10.0 and 1.2 x 5.1.
	for what, want := range map[string]string{pacer: "yes", cpuInTree: "yes", cpuNaive: "yes", ofCeiling: "yes"} {
		if got[what] != want {
			t.Errorf("all strategies: %q says %q, want %q", what, got[what], want)
		}
	}
	if len(got) != 7 {
		t.Errorf("%d targets, want 7: %v", len(got), got)
	}

	// A slower default, a dearer patch.
	slower := append([]result(nil), all...)
	slower[1] = compared(w, defaultsName, 6.2, 270, 275, 279)
	got = verdicts(slower)
	for what, want := range map[string]string{pacer: "no", cpuInTree: "yes", cpuNaive: "no"} {
		if got[what] != want {
			t.Errorf("slower defaults: %q says %q, want %q", what, got[what], want)
		}
	}

	// As SVM_BENCH_ONLY='^svm \(defaults\)|naive.*8 worker|in-tree' leaves
	// them: no ceiling, no svm unthrottled, no naive loop with 1 worker.
	few := []result{all[1], all[4], all[5]}
	got = verdicts(few)
	for what, want := range map[string]string{
		pacer:     "not run: " + labelUnthrottled,
		cpuInTree: "yes",
		cpuNaive:  "yes",
		ofCeiling: "not run: " + labelCeiling,
		"svm unthrottled at no more API server CPU per object than the naive loop": "not run: " + labelUnthrottled + ", " + labelNaive1,
	} {
		if got[what] != want {
			t.Errorf("few strategies: %q says %q, want %q", what, got[what], want)
		}
	}

	// No in-tree migrator: the one target that needs it says so.
	got = verdicts(all[:5])
	if got[cpuInTree] != "not run: "+labelInTree || got[cpuNaive] != "yes" {
		t.Errorf("no in-tree migrator: %q, %q", got[cpuInTree], got[cpuNaive])
	}

	// A workload not compared in the run has no targets.
	if ts := speedTargets(all, nil); len(ts) != 0 {
		t.Errorf("%d targets for no workload", len(ts))
	}
}
