package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/svm-project/svm/test/framework"
)

// equalRatePrice measures what each migrator costs another client at the
// same rate: kube-controller-manager's in-tree migrator, then svm with
// --qps set to the rate at which the in-tree migrator wrote, each beside
// the probe client on one shared server with n objects, rounds times.
// svm runs as its ServiceAccount in its own priority level,
// kube-controller-manager with the admin's credentials, as the control
// plane starts it (exempt from API Priority and Fairness).
//
// The in-tree migrator's price is read from the reads sent while it wrote
// (from its first write to its last, dated from etcd): before its first
// write it waits for its garbage collector's cache, and reads sent then
// would make it look cheaper than it is. svm's is read over its whole
// pass, its start and lists included, and again over the same kind of
// window as the in-tree migrator's (its writes dated the same way).
//
// Every migrator's reads are kept across the rounds and pooled: the note
// gives each round's figures and then each migrator's over all its reads,
// and the price is judged once, on the p99 of every read beside svm at
// its defaults against that of every read beside the in-tree migrator
// (see priceTarget).
//
// SVM_BENCH_AT_RATE_FLAGS adds flags to svm's
// --qps, one pass of svm for each set (sets apart by ";"; an empty set is
// svm's defaults at that rate), to tell apart what its price comes from.
// A set whose first word is svm=PATH runs the svm binary at PATH (a build
// of an earlier commit) with the rest: what a change bought, measured in
// the same rounds as the change. SVM_BENCH_AT_RATE_WRITERS adds
// pacedWriters at the same rate (admin-listed, svm-listed, svm-lists,
// apart by ","): what of svm's price its credentials and priority level,
// its lists, or the rest of its process make. SVM_BENCH_AT_RATE_QPS sets
// the rate and leaves the in-tree migrator out.
func equalRatePrice(b *testing.B, n, rounds int) ([]result, string, *atRatePrice) {
	env, w, probe := sharedServer(b, "custom resources, the price to another client at the in-tree migrator's rate", n)
	var results []result
	price := &atRatePrice{}
	rows := []string{
		"| round | migrator | objects/s while writing | the client's reads | p50 | p99 | max | p99 idle | p99 / p99 idle |",
		"|---|---|---|---|---|---|---|---|---|",
	}
	row := func(round int, name string, rate float64, idle, during []time.Duration) {
		rows = append(rows, fmt.Sprintf("| %d | %s | %.0f | %d | %s | %s | %s | %s | %.2f |", round, name, rate, len(during),
			percentile(during, 50), percentile(during, 99), percentile(during, 100), percentile(idle, 99), p99Ratio(idle, during)))
	}
	for round := 1; round <= rounds; round++ {
		// The in-tree migrator, its idle reads taken once
		// kube-controller-manager has started and is quiet.
		rate := float64(envInt("SVM_BENCH_AT_RATE_QPS", 0))
		if rate == 0 {
			it := &inTreeRun{}
			r, idle, reads := sharedPass(b, env, w, probe, it.strategy())
			figs := r.passes[0].usage.inTree
			if figs == nil || figs.lastWrite <= figs.firstWrite {
				b.Fatalf("round %d: the in-tree migrator's writes could not be dated from etcd", round)
			}
			rate = float64(n) / (figs.lastWrite - figs.firstWrite).Seconds()
			during := latencies(reads, it.created.Add(figs.firstWrite), it.created.Add(figs.lastWrite))
			row(round, inTreeName, rate, idle, during)
			price.inTree = price.pool(inTreeName).add(rate, idle, during)
			results = append(results, r)
		}

		// svm at that rate.
		qps := strconv.Itoa(int(math.Round(rate)))
		for _, set := range flagSets("SVM_BENCH_AT_RATE_FLAGS", [][]string{nil}) {
			binary, flags := svmBuildOf(set)
			build, key := "svm", "svm"
			if binary != "" {
				build, key = filepath.Base(binary), "svm="+binary
			}
			key = strings.Join(append([]string{key}, flags...), " ") + atItsRate
			name := strings.Join(append([]string{build + " --qps " + qps}, flags...), " ")
			var span writeSpan
			s, svmIdle, reads := sharedPass(b, env, w, probe, span.wrap(svmBuildShared(b, env, binary, name+" (the in-tree migrator's rate)", append([]string{"--qps", qps}, flags...)...)))
			during := latencies(reads, time.Time{}, time.Time{})
			row(round, name, s.rate(), svmIdle, during)
			pool := price.pool(key).add(s.rate(), svmIdle, during)
			if binary == "" && len(flags) == 0 {
				price.svm = pool
			}
			// The same pass over the in-tree migrator's kind of window:
			// from its first write to its last, its start and first list
			// left out as the in-tree migrator's are.
			if span.last <= span.first {
				b.Fatalf("round %d: %s's writes could not be dated from etcd", round, name)
			}
			writing := float64(n) / (span.last - span.first).Seconds()
			during = latencies(reads, span.started.Add(span.first), span.started.Add(span.last))
			row(round, name+", while writing", writing, svmIdle, during)
			price.pool(key+", while writing").add(writing, svmIdle, during)
			results = append(results, s)
		}
		// Writers reduced to the writes, at the same rate.
		for _, kind := range strings.Fields(strings.ReplaceAll(os.Getenv("SVM_BENCH_AT_RATE_WRITERS"), ",", " ")) {
			kubeconfig := ""
			if strings.HasPrefix(kind, "svm") {
				kubeconfig = env.ServiceAccountKubeconfig(b, "svm-system", "svm-controller")
			}
			name := fmt.Sprintf("writer %s --qps %s", kind, qps)
			var span writeSpan
			s, idle, reads := sharedPass(b, env, w, probe, span.wrap(pacedWriter(b, env, name, kubeconfig, rate, strings.HasSuffix(kind, "-listed"), int64(math.Round(rate)))))
			if span.last <= span.first {
				b.Fatalf("round %d: %s's writes could not be dated from etcd", round, name)
			}
			writing := float64(n) / (span.last - span.first).Seconds()
			during := latencies(reads, span.started.Add(span.first), span.started.Add(span.last))
			row(round, name+", while writing", writing, idle, during)
			price.pool("writer "+kind+atItsRate+", while writing").add(writing, idle, during)
			results = append(results, s)
		}
	}
	// Each migrator over all its rounds: every read pooled, each
	// percentile taken once.
	for _, key := range price.order {
		p := price.pools[key]
		rows = append(rows, fmt.Sprintf("| all %d | %s | %.0f (median) | %d | %s | %s | %s | %s | %.2f |", p.passes, key, median(p.rates), len(p.during),
			percentile(p.during, 50), p.p99(), percentile(p.during, 100), percentile(p.idle, 99), p99Ratio(p.idle, p.during)))
	}
	note := fmt.Sprintf("The price to another client at one rate (%d objects; the client reads a ConfigMap 20 times a second as an ordinary ServiceAccount; kube-controller-manager with the admin's credentials, svm as its ServiceAccount with `--qps` set to the rate at which the in-tree migrator wrote in the same round; the in-tree migrator's price from the reads sent between its first and last write, svm's from every read sent while its process ran and, in its rows marked while writing, from those sent between its first and last write; the rows marked all pool the reads of every round):\n\n%s",
		n, strings.Join(rows, "\n"))
	b.Log(note)
	return results, note, price
}

// atItsRate ends the names of the pooled rows of the migrators run at the
// in-tree migrator's rate.
const atItsRate = " at the in-tree migrator's rate"

// Bounds of the price at one rate.
const (
	// priceFactor is how many times the in-tree migrator's price svm's may
	// be: the client's pooled p99 beside svm against its pooled p99 beside
	// the in-tree migrator at the same rate.
	priceFactor = 1.1
	// minPriceReads is the fewest reads a side the price is judged on: a
	// p99 of 3,000 reads is their 30th slowest, one of a few hundred
	// (a round's) their third or fourth.
	minPriceReads = 3000
)

// readPool is the probe client's reads beside one migrator, kept across
// the rounds: its percentiles are taken once over all of them.
type readPool struct {
	passes       int
	during, idle []time.Duration
	rates        []float64
}

// add pools one pass's reads (idle, before it; during, beside it) and
// rate, and returns p.
func (p *readPool) add(rate float64, idle, during []time.Duration) *readPool {
	p.passes++
	p.rates = append(p.rates, rate)
	p.idle = append(p.idle, idle...)
	p.during = append(p.during, during...)
	return p
}

// p99 is the p99 of every read beside the migrator.
func (p *readPool) p99() time.Duration { return percentile(p.during, 99) }

// atRatePrice is what equalRatePrice measured: every migrator's reads,
// pooled over the rounds, and the two the price is judged on, nil when
// they did not run.
type atRatePrice struct {
	order []string
	pools map[string]*readPool
	// svm is svm at its defaults (the run's build, no flags beyond
	// --qps), read over its whole pass; inTree is the in-tree migrator,
	// read while it wrote.
	svm, inTree *readPool
}

// pool is the pool of the migrator key, made on first use.
func (a *atRatePrice) pool(key string) *readPool {
	if a.pools == nil {
		a.pools = map[string]*readPool{}
	}
	p, ok := a.pools[key]
	if !ok {
		p = &readPool{}
		a.pools[key] = p
		a.order = append(a.order, key)
	}
	return p
}

// priceTarget judges the price at one rate from a (nil when the part did
// not run): the client's p99 over every read beside svm at its defaults
// against its p99 over every read beside the in-tree migrator, with the
// idle p99 over every idle read before either, judged only on at least
// minPriceReads reads a side.
func priceTarget(a *atRatePrice) target {
	t := target{what: fmt.Sprintf("custom resources: the price to another client at one rate: its p99 beside svm (defaults, `--qps` at the in-tree migrator's rate) at most %.1fx its p99 beside the in-tree migrator, the reads of all rounds pooled (at least %d a side)",
		priceFactor, minPriceReads)}
	if a == nil {
		t.measured, t.unjudged = "-", "not run: price-at-one-rate"
		return t
	}
	ran := map[string]bool{labelDefaults + " at that rate": a.svm != nil, labelInTree: a.inTree != nil}
	if t.unjudged = notRun(ran, labelDefaults+" at that rate", labelInTree); t.unjudged != "" {
		t.measured = "-"
		return t
	}
	svm, it := a.svm, a.inTree
	idle := append(slices.Clone(it.idle), svm.idle...)
	ratio := float64(svm.p99()) / float64(it.p99())
	t.measured = fmt.Sprintf("p99 %s beside svm (%d reads in %d passes, %.0f objects/s) / %s beside the in-tree migrator (%d reads in %d passes, %.0f objects/s while writing) = %.2fx; idle p99 %s (%d reads)",
		svm.p99(), len(svm.during), svm.passes, median(svm.rates), it.p99(), len(it.during), it.passes, median(it.rates), ratio,
		percentile(idle, 99), len(idle))
	if len(svm.during) < minPriceReads || len(it.during) < minPriceReads {
		t.measured += fmt.Sprintf("; %d a side needed", minPriceReads)
	}
	if len(svm.during) < minPriceReads || len(it.during) < minPriceReads {
		t.unjudged = "not enough reads"
		return t
	}
	t.met = ratio <= priceFactor
	return t
}

// svmBuildOf splits a flag set into the svm binary its first word names
// (svm=PATH; "" for the run's build) and svm's flags.
func svmBuildOf(set []string) (binary string, flags []string) {
	if len(set) > 0 {
		if path, ok := strings.CutPrefix(set[0], "svm="); ok {
			return path, set[1:]
		}
	}
	return "", set
}

// flagSets are the sets of svm's flags the environment variable name
// lists, sets apart by ";" (an empty set is svm's defaults), or def when
// it is unset or empty.
func flagSets(name string, def [][]string) [][]string {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var sets [][]string
	for _, set := range strings.Split(v, ";") {
		sets = append(sets, strings.Fields(set))
	}
	return sets
}

// pacedWriter is a migrator reduced to its writes, to tell apart what
// svm's price at one rate comes from: one merge patch of uid and
// resourceVersion at a time (the in-tree migrator's write and svm's), sent
// on a ticker at qps, with the credentials of kubeconfig (the admin's when
// empty). With listed, every object's metadata is listed before the pass,
// outside its window, as the in-tree migrator reads its garbage
// collector's cache; otherwise it lists chunk objects at a time between
// its writes, as svm does.
func pacedWriter(b *testing.B, env *framework.Env, name, kubeconfig string, qps float64, listed bool, chunk int64) strategy {
	cfg := env.Config
	if kubeconfig != "" {
		var err error
		if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			b.Fatal(err)
		}
	}
	md := metadata.NewForConfigOrDie(unlimited(cfg))
	var objs []metav1.PartialObjectMetadata
	list := func(ctx context.Context, w *workload, cont string, limit int64) ([]metav1.PartialObjectMetadata, string, error) {
		l, err := md.Resource(w.resource).List(ctx, metav1.ListOptions{Limit: limit, Continue: cont})
		if err != nil {
			return nil, "", err
		}
		return l.Items, l.Continue, nil
	}
	s := strategy{name: name}
	if listed {
		s.prepare = func(b *testing.B, w *workload) func(*testing.B, string, *usage) {
			var err error
			if objs, _, err = list(b.Context(), w, "", 0); err != nil {
				b.Fatal(err)
			}
			return nil
		}
	}
	s.run = func(ctx context.Context, w *workload) (usage, error) {
		tick := time.NewTicker(time.Duration(float64(time.Second) / qps))
		defer tick.Stop()
		write := func(o metav1.PartialObjectMetadata) error {
			<-tick.C
			body := fmt.Appendf(nil, `{"metadata":{"uid":%q,"resourceVersion":%q}}`, o.UID, o.ResourceVersion)
			_, err := md.Resource(w.resource).Namespace(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, body, fieldManager)
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		if listed {
			for _, o := range objs {
				if err := write(o); err != nil {
					return usage{}, err
				}
			}
			return usage{}, nil
		}
		for cont := ""; ; {
			items, next, err := list(ctx, w, cont, chunk)
			if err != nil {
				return usage{}, err
			}
			for _, o := range items {
				if err := write(o); err != nil {
					return usage{}, err
				}
			}
			if cont = next; cont == "" {
				return usage{}, nil
			}
		}
	}
	return s
}
