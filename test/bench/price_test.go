package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
// window as the in-tree migrator's (its writes dated the same way). SVM_BENCH_AT_RATE_FLAGS adds flags to svm's
// --qps, one pass of svm for each set (sets apart by ";"; an empty set is
// svm's defaults at that rate), to tell apart what its price comes from.
// A set whose first word is svm=PATH runs the svm binary at PATH (a build
// of an earlier commit) with the rest: what a change bought, measured in
// the same rounds as the change. SVM_BENCH_AT_RATE_WRITERS adds
// pacedWriters at the same rate (admin-listed, svm-listed, svm-lists,
// apart by ","): what of svm's price its credentials and priority level,
// its lists, or the rest of its process make. SVM_BENCH_AT_RATE_QPS sets
// the rate and leaves the in-tree migrator out.
func equalRatePrice(b *testing.B, n, rounds int) ([]result, string) {
	env, w, probe := sharedServer(b, "custom resources, the price to another client at the in-tree migrator's rate", n)
	var results []result
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
			row(round, inTreeName, rate, idle, latencies(reads, it.created.Add(figs.firstWrite), it.created.Add(figs.lastWrite)))
			results = append(results, r)
		}

		// svm at that rate.
		qps := strconv.Itoa(int(math.Round(rate)))
		for _, set := range flagSets("SVM_BENCH_AT_RATE_FLAGS", [][]string{nil}) {
			binary, flags := svmBuildOf(set)
			build := "svm"
			if binary != "" {
				build = filepath.Base(binary)
			}
			name := strings.Join(append([]string{build + " --qps " + qps}, flags...), " ")
			var span writeSpan
			s, svmIdle, reads := sharedPass(b, env, w, probe, span.wrap(svmBuildShared(b, env, binary, name+" (the in-tree migrator's rate)", append([]string{"--qps", qps}, flags...)...)))
			row(round, name, s.rate(), svmIdle, latencies(reads, time.Time{}, time.Time{}))
			// The same pass over the in-tree migrator's kind of window:
			// from its first write to its last, its start and first list
			// left out as the in-tree migrator's are.
			if span.last <= span.first {
				b.Fatalf("round %d: %s's writes could not be dated from etcd", round, name)
			}
			row(round, name+", while writing", float64(n)/(span.last-span.first).Seconds(), svmIdle,
				latencies(reads, span.started.Add(span.first), span.started.Add(span.last)))
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
			row(round, name+", while writing", float64(n)/(span.last-span.first).Seconds(), idle,
				latencies(reads, span.started.Add(span.first), span.started.Add(span.last)))
			results = append(results, s)
		}
	}
	note := fmt.Sprintf("The price to another client at one rate (%d objects; the client reads a ConfigMap 20 times a second as an ordinary ServiceAccount; kube-controller-manager with the admin's credentials, svm as its ServiceAccount with `--qps` set to the rate at which the in-tree migrator wrote in the same round; the in-tree migrator's price from the reads sent between its first and last write, svm's from every read sent while its process ran and, in its rows marked while writing, from those sent between its first and last write):\n\n%s",
		n, strings.Join(rows, "\n"))
	b.Log(note)
	return results, note
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
