package framework

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

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
		if !slices.Contains(r.Decodes(from, gv.Group, v.Kind), gv) {
			out[key] = v.APIVersion + " " + v.Kind
		}
	}
	return out
}
