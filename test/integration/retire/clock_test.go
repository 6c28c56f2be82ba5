package retire_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestRetireWaitsOutTheDrainMarginOnAFastClock is
// TestRetireWaitsForWritesInFlight on a workstation whose clock is 5
// minutes fast (faked with kubeclients.SkewEnv: Go reads the time through
// the vDSO, which libfaketime cannot fake). The CRD's change is dated by
// the API server's clock; read against the workstation's, the drain margin
// (1 minute) would have passed 4 minutes ago, svm would list at once,
// before the write held across the flip lands in v1, and prune v1 with
// that object stored in it. svm measures the wait on the API server's
// clock instead: it still says it waits, it lists no sooner than the
// margin after the flip, and it rewrites the held object too.
func TestRetireWaitsOutTheDrainMarginOnAFastClock(t *testing.T) {
	t.Parallel()
	const n = 20
	// The write is held longer than svm takes to start and list, however
	// loaded the machine.
	const requestTimeout, hold, skew = 30 * time.Second, 12 * time.Second, 5 * time.Minute
	env := framework.Start(t, controlplane.Options{APIServerFlags: []string{"--request-timeout=" + requestTimeout.String()}})
	kubeconfig := env.KubeconfigFile(t)
	r := framework.Resource{Group: "fastclock.example.com", Plural: "widgets", Kind: "Widget"}
	env.CreateResource(t, r)
	env.CreateObjects(t, r, []string{"retire"}, n)
	margin := 2 * requestTimeout
	args := []string{"retire", "widgets.v1." + r.Group, "--crd-drain-margin", margin.String()}

	// The hook is read: a skew that is no duration stops svm before it
	// asks anything (so this run changes nothing).
	code, out, errOut := framework.RunSVMWithEnv(t, []string{kubeclients.SkewEnv + "=five minutes"}, kubeconfig, time.Minute, args...)
	if code == 0 || !strings.Contains(errOut, kubeclients.SkewEnv) {
		t.Fatalf("svm retire with %s=\"five minutes\": exit %d, want a refusal that names it\n%s\n%s", kubeclients.SkewEnv, code, out, errOut)
	}

	write := framework.HoldWrite(t, env, r, "v1", "retire", "obj-00003", hold)
	// Taken before the flip: the drain ends at least margin after it.
	beforeFlip := time.Now()
	env.SetStorage(t, r, "v2")
	code, out, errOut = framework.RunSVMWithEnv(t, []string{kubeclients.SkewEnv + "=" + skew.String()}, kubeconfig, 3*time.Minute, args...)
	took := time.Since(beforeFlip)
	write.Wait(t)
	t.Logf("svm retire on a clock %s fast ended %s after the flip", skew, took.Round(time.Millisecond))
	if code != 0 {
		t.Fatalf("svm retire: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "waiting until") || !strings.Contains(errOut, "--crd-drain-margin "+margin.String()) {
		t.Errorf("svm retire on a clock %s fast does not say it waits for writes in flight:\n%s", skew, errOut)
	}
	// svm lists only once the wait is over, and ends after its list.
	if took < margin {
		t.Errorf("svm retire on a clock %s fast ended %s after the flip, before the drain margin %s", skew, took.Round(time.Millisecond), margin)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	if got := env.CRDStoredVersions(t, r.CRDName()); !slices.Equal(got, []string{"v2"}) {
		t.Errorf("storedVersions %v, want [v2]", got)
	}
}
