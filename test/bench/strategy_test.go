package bench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// rewriter migrates framework.Widgets once and returns how many objects it
// wrote.
type rewriter func(ctx context.Context, cfg *rest.Config) error

// svmEngine is svm's strategy: a metadata list and a merge patch of each
// object's uid and resourceVersion.
func svmEngine(workers int) rewriter { return svmEngineFor(workers, framework.Widgets) }

func svmEngineFor(workers int, gvr schema.GroupVersionResource) rewriter {
	return func(ctx context.Context, cfg *rest.Config) error {
		// Unpaced: the ceiling search raises concurrency itself.
		m, err := migrator.New(cfg, migrator.Options{Workers: workers, DisablePacing: true})
		if err != nil {
			return err
		}
		_, err = m.Run(ctx, migrator.Request{Resource: gvr})
		return err
	}
}

// fullUpdate is the naive baseline, the strategy of the reference migrator
// and of `kubectl get -o json | kubectl replace`: list whole objects in
// chunks and send each back unmodified with an Update.
func fullUpdate(workers int) rewriter { return fullUpdateFor(workers, framework.Widgets) }

func fullUpdateFor(workers int, gvr schema.GroupVersionResource) rewriter {
	return func(ctx context.Context, cfg *rest.Config) error {
		client, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		res := client.Resource(gvr)
		token := ""
		for {
			list, err := res.List(ctx, metav1.ListOptions{Limit: 500, Continue: token})
			if err != nil {
				return err
			}
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(workers)
			for i := range list.Items {
				obj := &list.Items[i]
				g.Go(func() error {
					_, err := res.Namespace(obj.GetNamespace()).Update(gctx, obj, metav1.UpdateOptions{})
					if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
						return nil
					}
					return err
				})
			}
			if err := g.Wait(); err != nil {
				return err
			}
			if token = list.GetContinue(); token == "" {
				return nil
			}
		}
	}
}

// widgetsBench starts a control plane with n widgets stored in v1, waits
// until its API server is quiet, and returns it with a meter of the API
// server's CPU and a client config without a client-side rate limit, so
// that the server is measured, not a limiter.
func widgetsBench(b *testing.B, n int) (*framework.Env, int, *cpuMeter, *rest.Config) {
	b.Helper()
	env := framework.Start(b, controlplane.Options{})
	env.CreateWidgetCRD(b, "v1")
	env.CreateWidgets(b, "v1", []string{"bench-a", "bench-b", "bench-c", "bench-d"}, n)
	pid := env.CP.APIServerPID()
	if _, err := settle(pid, settleLimit); err != nil {
		b.Fatal(err)
	}
	meter, err := newCPUMeter(pid, 3*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0
	return env, pid, meter, cfg
}

// BenchmarkRewriteStrategies compares ways of rewriting every object of a
// custom resource after a storage version flip, on the same objects in one
// run. Each iteration flips the storage version and rewrites all objects.
// SVM_BENCH_OBJECTS sets the number of objects (default 10000).
func BenchmarkRewriteStrategies(b *testing.B) {
	n := envInt("SVM_BENCH_OBJECTS", 10000)
	env, pid, meter, cfg := widgetsBench(b, n)
	prefix := framework.EtcdPrefix(framework.Widgets.GroupResource())
	stored := "v1"

	for _, s := range []struct {
		name    string
		rewrite rewriter
	}{
		{"svm/workers=8", svmEngine(8)},
		{"svm/workers=32", svmEngine(32)},
		{"full-update/workers=1", fullUpdate(1)},
		{"full-update/workers=8", fullUpdate(8)},
		{"full-update/workers=32", fullUpdate(32)},
	} {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			var busy, wall time.Duration
			for range b.N {
				b.StopTimer()
				target := map[string]string{"v1": "v2", "v2": "v1"}[stored]
				flipWidgetsStorage(b, env, target)
				stored = target
				if _, err := settle(pid, settleLimit); err != nil {
					b.Fatal(err)
				}
				if err := meter.start(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := s.rewrite(b.Context(), cfg); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				w := time.Since(meter.startWall)
				if _, err := settle(pid, settleLimit); err != nil {
					b.Fatal(err)
				}
				cpu, err := meter.stop()
				if err != nil {
					b.Fatal(err)
				}
				busy, wall = busy+cpu, wall+w
				if got := env.StoredVersions(b, prefix); got["example.com/"+target] != n {
					b.Fatalf("after %s: stored %v, want all %d in %s", s.name, got, n, target)
				}
			}
			objects := float64(n * b.N)
			b.ReportMetric(objects/wall.Seconds(), "objects/s")
			b.ReportMetric(float64(busy.Microseconds())/1000/objects, "server-cpu-ms/object")
		})
	}
}
