package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/svm-project/svm/test/framework"
)

// apfFactor is the stated bound: while svm runs at its defaults, another
// client's reads keep a p99 within apfFactor of their p99 on the idle
// server.
const apfFactor = 1.5

// apfSuite runs `svm migrate` at its defaults (adaptive pacing on) on a
// shared server (see sharedPass). It reports the other client's latency
// when the server is idle and while svm runs, and judges the p99 against
// apfFactor times the idle one.
func apfSuite(b *testing.B, n int) (result, string, target) {
	env, w, probe := sharedServer(b, "custom resources, svm as its ServiceAccount beside another client", n)
	r, idle, reads := sharedPass(b, env, w, probe, svmShared(b, env, defaultsName))
	during := latencies(reads, time.Time{}, time.Time{})
	note := fmt.Sprintf("API Priority and Fairness: another client's reads took p50 %s, p99 %s, max %s on the idle server (%d reads) and p50 %s, p99 %s, max %s while svm ran at %.0f objects/s in its own priority level (%d reads)",
		percentile(idle, 50), percentile(idle, 99), percentile(idle, 100), len(idle),
		percentile(during, 50), percentile(during, 99), percentile(during, 100), r.rate(), len(during))
	b.Log(note)
	ratio := p99Ratio(idle, during)
	t := target{
		what:     fmt.Sprintf("shared server: another client's p99 while svm runs at its defaults within %.1fx of its idle p99", apfFactor),
		measured: fmt.Sprintf("p99 %s during / %s idle = %.2f, svm at %.0f objects/s", percentile(during, 99), percentile(idle, 99), ratio, r.rate()),
		met:      len(during) > 0 && ratio <= apfFactor,
	}
	return r, note, t
}

// priceSettings are the svm settings whose price to another client
// apfPrice measures: fixed rates, fixed writes in flight, and the defaults.
var priceSettings = [][]string{
	{"--qps", "25"}, {"--qps", "50"}, {"--qps", "100"},
	{"--workers", "1", "--adaptive-pacing=false"}, {"--workers", "4", "--adaptive-pacing=false"},
	nil,
}

// apfPrice measures what svm's rate costs another client: the client's
// p99 against its idle p99 with svm at each of priceSettings (or those
// SVM_BENCH_PRICE_SETTINGS lists: svm's flags, settings apart by ";"), on
// n objects, one pass each. It returns the passes and a note with the
// curve.
func apfPrice(b *testing.B, n int) ([]result, string) {
	settings := flagSets("SVM_BENCH_PRICE_SETTINGS", priceSettings)
	env, w, probe := sharedServer(b, "custom resources, the price to another client", n)
	var results []result
	var points []string
	for _, args := range settings {
		name := "svm " + strings.Join(args, " ")
		if len(args) == 0 {
			name = defaultsName
		}
		r, idle, reads := sharedPass(b, env, w, probe, svmShared(b, env, name, args...))
		during := latencies(reads, time.Time{}, time.Time{})
		results = append(results, r)
		points = append(points, fmt.Sprintf("%s: %.0f objects/s, p99 %s against %s idle (%.2fx)",
			name, r.rate(), percentile(during, 99), percentile(idle, 99), p99Ratio(idle, during)))
	}
	note := fmt.Sprintf("The price of svm's rate to another client (%d objects, svm as its ServiceAccount in its own priority level, the client's reads at 20/s): %s",
		n, strings.Join(points, "; "))
	b.Log(note)
	return results, note
}

// sharedServer starts a control plane with svm's manifests (its
// ServiceAccount, roles and API Priority and Fairness objects), n widgets
// and another client, an ordinary ServiceAccount that reads a ConfigMap.
func sharedServer(b *testing.B, name string, n int) (*framework.Env, *workload, kubernetes.Interface) {
	env := framework.Start(b, benchControlPlane())
	env.ApplyManifests(b, env.RenderManifests(b, "config/default"))
	env.CreateWidgetCRD(b, "v1")
	w := widgetsWorkload(b, env, name, n)
	return env, w, probeClient(b, env)
}

// svmShared is `svm migrate` with args as svm's ServiceAccount, in its own
// priority level, as svm is installed.
func svmShared(b *testing.B, env *framework.Env, name string, args ...string) strategy {
	return svmBuildShared(b, env, "", name, args...)
}

// svmBuildShared is svmShared with the svm binary at path (see svmBuildAs).
func svmBuildShared(b *testing.B, env *framework.Env, binary, name string, args ...string) strategy {
	return svmBuildAs(binary, name+", as svm-controller", env.ServiceAccountKubeconfig(b, "svm-system", "svm-controller"), args...)
}

// sharedPass runs s while the other client reads 20 times a second, and
// returns the pass with the client's latencies on the idle server (30
// seconds, after the storage flip and s's preparation, once the server is
// quiet, right before s starts) and its reads while s ran.
func sharedPass(b *testing.B, env *framework.Env, w *workload, probe kubernetes.Interface, s strategy) (result, []time.Duration, []probeRead) {
	var idle []time.Duration
	var during []probeRead
	w.during = func(ctx context.Context) int {
		during = probeReads(ctx, probe, time.Hour)
		return 0
	}
	defer func() { w.during = nil }()
	prepare := s.prepare
	s.prepare = func(b *testing.B, w *workload) func(*testing.B, string, *usage) {
		var cleanup func(*testing.B, string, *usage)
		if prepare != nil {
			cleanup = prepare(b, w)
		}
		if _, err := settle(env.CP.APIServerPID(), settleLimit); err != nil {
			b.Fatal(err)
		}
		idle = probeLatencies(b.Context(), probe, 30*time.Second)
		return cleanup
	}
	r := pass(b, w, s)
	return r, idle, during
}

// probeClient is a client as an ordinary ServiceAccount that may read
// ConfigMaps in one namespace, with one ConfigMap to read.
func probeClient(b *testing.B, env *framework.Env) kubernetes.Interface {
	b.Helper()
	ctx := framework.Context(b, time.Minute)
	const ns = "probe"
	env.CreateNamespace(b, ns)
	for _, obj := range []any{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}, Data: map[string]string{"k": "v"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "probe"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "probe", Namespace: ns}}},
	} {
		var err error
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = env.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ConfigMap:
			_, err = env.Kube.CoreV1().ConfigMaps(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = env.Kube.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = env.Kube.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", env.ServiceAccountKubeconfig(b, ns, "probe"))
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	return kubernetes.NewForConfigOrDie(cfg)
}

// probeLatencies reads the probe ConfigMap 20 times a second until ctx
// ends or for d, and returns each read's latency (failed reads count as
// the time they took).
func probeLatencies(ctx context.Context, client kubernetes.Interface, d time.Duration) []time.Duration {
	return latencies(probeReads(ctx, client, d), time.Time{}, time.Time{})
}

// probeRead is one read of the probe ConfigMap: when it was sent, and how
// long its answer took.
type probeRead struct {
	at   time.Time
	took time.Duration
}

// probeReads reads the probe ConfigMap 20 times a second until ctx ends
// or for d (failed reads count as the time they took).
func probeReads(ctx context.Context, client kubernetes.Interface, d time.Duration) []probeRead {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var out []probeRead
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		start := time.Now()
		_, _ = client.CoreV1().ConfigMaps("probe").Get(context.WithoutCancel(ctx), "probe", metav1.GetOptions{})
		out = append(out, probeRead{at: start, took: time.Since(start)})
	}
}

// latencies are the latencies of the reads sent from from until to; a
// zero bound is open.
func latencies(reads []probeRead, from, to time.Time) []time.Duration {
	var out []time.Duration
	for _, r := range reads {
		if (from.IsZero() || !r.at.Before(from)) && (to.IsZero() || !r.at.After(to)) {
			out = append(out, r.took)
		}
	}
	return out
}

// p99Ratio is the p99 of during against the p99 of idle.
func p99Ratio(idle, during []time.Duration) float64 {
	return float64(percentile(during, 99)) / float64(percentile(idle, 99))
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p+99)/100-1)
	return s[max(i, 0)].Round(100 * time.Microsecond)
}
