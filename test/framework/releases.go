package framework

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/cli"
	"github.com/svm-project/svm/internal/etcdvalue"
	"github.com/svm-project/svm/internal/upgrade"
)

// SupportedMinors are the Kubernetes minors svm supports, oldest first:
// the matrix tests run on a release of each (make matrix builds them, see
// KUBE_MATRIX in the Makefile) and README's support table lists them.
var SupportedMinors = []string{"1.34", "1.35", "1.36", "1.37"}

// ServerMinor is the minor ("1.35") the API server e reaches reports.
func (e *Env) ServerMinor(t testing.TB) string {
	t.Helper()
	v, err := e.Discovery.ServerVersion()
	if err != nil {
		t.Fatalf("read the API server's version: %v", err)
	}
	return v.Major + "." + strings.TrimSuffix(v.Minor, "+")
}

// WaitServerMinor waits until the API server e reaches reports minor, as
// after a restart on another release's binary.
func (e *Env) WaitServerMinor(t testing.TB, minor string) {
	t.Helper()
	Eventually(t, "the API server reports "+minor, time.Minute, func(ctx context.Context) (bool, error) {
		v, err := e.Discovery.ServerVersion()
		return err == nil && v.Major+"."+strings.TrimSuffix(v.Minor, "+") == minor, nil
	})
}

// Undecodable reads every value in etcd and returns the keys of those a
// Kubernetes release could not decode after an upgrade from the API
// server's, by the apiVersion and kind they are stored in: built-in
// objects in a version removed on the way (upgrade.Release.Decodes). Custom resources are decoded by their
// CRDs, which an upgrade does not change, and encrypted values hide their
// version: neither is judged here.
func (e *Env) Undecodable(t testing.TB, release string) map[string]string {
	t.Helper()
	r, err := upgrade.ParseRelease(release)
	if err != nil {
		t.Fatal(err)
	}
	from, err := upgrade.ParseRelease(e.ServerMinor(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for key, raw := range e.RawValues(t, "/registry/") {
		v, err := etcdvalue.Inspect(raw)
		if err != nil || v.Encryption != nil || v.APIVersion == "" {
			continue
		}
		gv, err := schema.ParseGroupVersion(v.APIVersion)
		if err != nil || !upgrade.BuiltIn(gv.Group) {
			continue
		}
		// Removed on the way; a version removed before the server's
		// release is still read by it, as CRDs' v1beta1 is.
		if gone, ok := upgrade.RemovedIn(gv.WithKind(v.Kind)); ok && from.Before(gone) && !r.Before(gone) {
			out[key] = v.APIVersion + " " + v.Kind
		}
	}
	return out
}

// CheckRelease runs svm check-upgrade --to release -o json and checks its
// verdict against etcd (Undecodable): never safe while etcd holds a
// built-in object the release cannot decode, and every such object's
// resource unsafe. It returns the report.
func (e *Env) CheckRelease(t testing.TB, kubeconfig, release string) upgrade.Report {
	t.Helper()
	code, stdout, stderr := RunSVM(t, kubeconfig, 3*time.Minute, "check-upgrade", "--to", release, "-o", "json")
	var report upgrade.Report
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatalf("svm check-upgrade --to %s -o json exited %d: %v\n%s\n%s", release, code, err, stdout, stderr)
	}
	if want := cli.ExitCode(report.Verdict); code != want {
		t.Errorf("svm check-upgrade --to %s exited %d with verdict %s, want %d", release, code, report.Verdict, want)
	}
	if report.Release == nil || report.Release.To != release {
		t.Errorf("check-upgrade --to %s reports target %+v", release, report.Release)
	}
	undecodable := e.Undecodable(t, release)
	for key, what := range undecodable {
		// Keys name the group only for groups with a dot in them.
		r := etcdvalue.ResourceOfKey(key)
		if !slices.ContainsFunc(report.Resources, func(res upgrade.Resource) bool {
			return res.Verdict == upgrade.VerdictUnsafe && (res.Name == r || strings.HasPrefix(res.Name, r+"."))
		}) {
			t.Errorf("etcd holds %s as %s, which Kubernetes %s cannot decode, but check-upgrade does not say %s is unsafe (verdict %s)", key, what, release, r, report.Verdict)
		}
	}
	if report.Verdict == upgrade.VerdictSafe && len(undecodable) > 0 {
		t.Errorf("check-upgrade --to %s says safe while etcd holds %d objects Kubernetes %s cannot decode", release, len(undecodable), release)
	}
	t.Logf("check-upgrade --to %s on %s: %s (exit %d); etcd holds %d objects it cannot decode", release, e.ServerMinor(t), report.Verdict, code, len(undecodable))
	for _, r := range report.Resources {
		if r.Verdict != upgrade.VerdictSafe {
			t.Logf("  %s %s: %s", r.Name, r.Verdict, strings.Join(r.Reasons, "; "))
		}
	}
	return report
}
