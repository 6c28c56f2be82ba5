package migrator_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// migrateRSSBound is the peak RSS `svm migrate` must stay under in
// TestMemoryFollowsNeitherSizeNorOrder. svm migrate holds about 55 MB
// however many small objects it migrates (docs/benchmarks.md); holding one
// chunk of these objects' metadata as it was listed would take it past
// 100 MB, as it did before lists were read as a stream.
const migrateRSSBound = 90e6

// TestMemoryFollowsNeitherSizeNorOrder migrates, with `svm migrate` at its
// defaults, 300 small objects followed, in the order lists bring them, by
// 100 whose metadata weighs 240 KB each (an annotation near the API's
// limit, such as kubectl's last-applied-configuration of a large object):
// a first chunk of 500 would bring all 25 MB of metadata in one list. svm
// reads lists as a stream, within --chunk-bytes, and its peak RSS (VmHWM)
// stays under migrateRSSBound; every object is stored in the new version.
// docs/benchmarks.md ("Memory") measures the same shape at 1,000 Secrets
// of 1 MB.
func TestMemoryFollowsNeitherSizeNorOrder(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	const small, large, annotation = 300, 100, 240_000
	r := env.NewResource(t)
	ns := framework.TestName(t)
	env.CreateNamespace(t, ns)
	// The bound is on memory, not time: 25 MB of writes beside the
	// package's other tests on two loaded cores took over a minute once.
	ctx := framework.Context(t, 5*time.Minute)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range small + large {
		g.Go(func() error {
			// Lists come in key order: a-... before b-...
			obj := r.Object("v1", fmt.Sprintf("a-%03d", i), i)
			if i >= small {
				obj = r.Object("v1", fmt.Sprintf("b-%03d", i), i)
				blob := make([]byte, annotation*3/4)
				_, _ = rand.Read(blob)
				obj.SetAnnotations(map[string]string{"example.com/large": base64.StdEncoding.EncodeToString(blob)})
			}
			_, err := env.Dynamic.Resource(r.GVR("v1")).Namespace(ns).Create(gctx, obj, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("create objects: %v", err)
	}
	env.SetStorage(t, r, "v2")
	env.WaitWritesStoredIn(t, r, "v2")

	peak, out := migratePeakRSS(t, env, r.CRDName())
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": small + large})
	if !strings.Contains(out, fmt.Sprintf("re-stored %d", small+large)) {
		t.Errorf("svm migrate did not re-store all %d objects:\n%s", small+large, out)
	}
	if peak >= migrateRSSBound {
		t.Errorf("svm migrate's peak RSS was %.0f MB, want under %.0f MB", float64(peak)/1e6, migrateRSSBound/1e6)
	} else {
		t.Logf("svm migrate's peak RSS: %.0f MB", float64(peak)/1e6)
	}
}

// migratePeakRSS runs `svm migrate resource` at its defaults and returns
// its peak RSS, read from /proc/<pid>/status (VmHWM) while it runs, and
// its output.
func migratePeakRSS(t *testing.T, env *framework.Env, resource string) (int64, string) {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.CP.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	// The bound is on memory, not time: beside the package's other tests
	// on two loaded cores, the pacer may write a few objects a second.
	cmd := exec.CommandContext(framework.Context(t, 5*time.Minute), framework.SVMBinary(t), "migrate", resource, "--kubeconfig", kubeconfig)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var peak atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			hwm := framework.PeakRSS(cmd.Process.Pid)
			if hwm == 0 && peak.Load() > 0 {
				return // exited
			}
			peak.Store(max(peak.Load(), hwm))
			time.Sleep(20 * time.Millisecond)
		}
	}()
	err := cmd.Wait()
	<-sampled
	if err != nil {
		t.Fatalf("svm migrate: %v\n%s", err, out.String())
	}
	return peak.Load(), out.String()
}
