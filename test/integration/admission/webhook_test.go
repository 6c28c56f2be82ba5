// Package admission_test shows what svm does when an admission webhook or
// a ValidatingAdmissionPolicy refuses its writes: it names the refuser and
// counts what it refused, claims nothing it did not write, and, when asked
// (--through-status, spec.throughStatus), writes the refused objects
// through their status subresource, which the refusers do not cover,
// reading etcd to show every object stored in the new version, unchanged.
package admission_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// The tests create resources of their own, webhooks and policies that
// cover only those, and run svm migrate: they share one control plane.
func TestMain(m *testing.M) { framework.Main(m) }

// svm runs the command line in-process (framework.SVM).
var svm = framework.SVM

// TestAWebhookRefusesHalf: a validating webhook (served by the test on
// loopback) refuses the updates of half of 1,000 objects of a CRD with a
// status subresource, and the CRD's storage version moves to v2.
//
// Without --through-status, svm migrate fails, names the webhook and the
// 500 objects it refused, and etcd holds those 500 in v1 still. With it,
// every raw etcd value is in v2, every object's content is as before, the
// summary counts the 500 written through the status subresource, and the
// webhook was asked about no status write.
func TestAWebhookRefusesHalf(t *testing.T) {
	t.Parallel()
	const n = 1000
	env := framework.Shared(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)
	r := env.NewResourceWithStatus(t)
	name := r.CRDName()
	before := env.StoredInOldVersion(t, r, []string{framework.TestName(t) + "-a", framework.TestName(t) + "-b"}, n)
	keys := make([]string, 0, n)
	for key := range before {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	deny := map[string]bool{}
	for i, key := range keys {
		if i%2 == 0 {
			deny[key] = true
		}
	}
	hook := framework.StartDenyingWebhook(t, env, r, deny)
	const webhookName = "validate.example.com"

	t.Run("--dry-run", func(t *testing.T) {
		callsBefore := hook.TotalCalls()
		code, stdout, stderr := svm(t, "migrate", "--kubeconfig", kubeconfig, "--dry-run", name)
		if code != 0 {
			t.Fatalf("svm migrate --dry-run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		for _, want := range []string{
			name + ": admission checks asked about svm's writes, which may refuse them: 1\n",
			"  admission webhook " + webhookName + " (configuration test-" + name + ")\n",
			"  through the status subresource (--through-status): no admission webhook or policy is asked\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("svm migrate --dry-run does not say %q:\n%s", want, stdout)
			}
		}
		if got := hook.TotalCalls() - callsBefore; got != 0 {
			t.Errorf("svm migrate --dry-run wrote: the webhook was asked about %d writes", got)
		}
		env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v1": n})
	})

	t.Run("without --through-status", func(t *testing.T) {
		code, stdout, stderr := svm(t, "migrate", "--kubeconfig", kubeconfig, name)
		if code == 0 {
			t.Fatalf("svm migrate exited 0 though the webhook refused half the objects\nstdout:\n%s", stdout)
		}
		for _, want := range []string{
			fmt.Sprintf("%s: done, with failed objects: %d listed: migrated %d (re-stored %d, already current 0), written since the start 0, gone 0, failed %d in ", name, n, n/2, n/2, n/2),
			fmt.Sprintf("admission webhook %s refused %d objects: ", webhookName, n/2),
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("the summary lacks %q:\nstdout:\n%s\nstderr:\n%s", want, stdout, stderr)
			}
		}
		if strings.Contains(stdout, "status subresource") {
			t.Errorf("the summary claims writes through the status subresource, which were not asked for:\n%s", stdout)
		}
		env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v1": n / 2, r.Group + "/v2": n / 2})
		if got := env.CRDStoredVersions(t, name); !slices.Equal(got, []string{"v1", "v2"}) {
			t.Errorf("storedVersions = %v, want [v1 v2]: objects are still stored in v1", got)
		}
	})

	// svm retire neither prunes nor stops serving v1 while the webhook
	// keeps objects stored in it.
	t.Run("svm retire", func(t *testing.T) {
		code, stdout, stderr := svm(t, "retire", "--kubeconfig", kubeconfig, "--crd-drain-margin", framework.TestDrainMargin.String(), r.Plural+".v1."+r.Group)
		if code == 0 {
			t.Fatalf("svm retire exited 0 though the webhook refused half the objects\nstdout:\n%s", stdout)
		}
		for _, want := range []string{
			fmt.Sprintf("failed %d; managedFields moved off the retired versions on %d objects", n/2, n/2),
			`admission webhook "validate.example.com" denied the request`,
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("svm retire does not say %q:\nstdout:\n%s", want, stdout)
			}
		}
		if want := fmt.Sprintf("%d objects could not be rewritten", n/2); !strings.Contains(stderr, want) {
			t.Errorf("svm retire's error does not say %q:\n%s", want, stderr)
		}
		env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v1": n / 2, r.Group + "/v2": n / 2})
		if got := env.CRDStoredVersions(t, name); !slices.Equal(got, []string{"v1", "v2"}) {
			t.Errorf("storedVersions = %v, want [v1 v2]: objects are still stored in v1", got)
		}
		if !env.CRDServes(t, name, "v1") {
			t.Errorf("svm retire stopped serving v1, in which %d objects are stored", n/2)
		}
	})

	t.Run("with --through-status", func(t *testing.T) {
		callsBefore := hook.TotalCalls()
		start := time.Now()
		code, stdout, stderr := svm(t, "migrate", "--kubeconfig", kubeconfig, "--through-status", name)
		if code != 0 {
			t.Fatalf("svm migrate --through-status exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		want := fmt.Sprintf("%s: done: %d listed: migrated %d (re-stored %d, already current %d), written since the start 0, gone 0, failed 0; written through the status subresource after an admission denial %d in ",
			name, n, n, n/2, n/2, n/2)
		if !strings.Contains(stdout, want) {
			t.Errorf("the summary lacks %q:\n%s", want, stdout)
		}
		env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
		env.ExpectUnchanged(t, r.GVR("v1"), before)
		// Each object's own write was asked about once; the writes
		// through status, none.
		if got := hook.TotalCalls() - callsBefore; got != n {
			t.Errorf("the webhook was asked about %d writes of the objects, want %d: one each", got, n)
		}
		if got := hook.TotalSubresourceCalls(); got != 0 {
			t.Errorf("the webhook was asked about %d writes through the status subresource, want none", got)
		}
		t.Logf("svm migrate --through-status over %d objects, %d refused: %s", n, n/2, time.Since(start).Round(time.Millisecond))
	})
}
