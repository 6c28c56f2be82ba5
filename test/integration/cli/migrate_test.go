// Package cli_test runs `svm migrate` against a real control plane.
package cli_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// Tests that migrate objects of their own (a resource from NewResource,
// namespaces named after the test) share one control plane and run side by
// side. `svm migrate` creates no migration objects and no StorageStates,
// so TestKubectlPlugin, which shows every one, shares it too. Tests that
// restart the API server, run svm's controller, migrate everything, or
// count requests to a plural or a resource every test has keep a control
// plane of their own.
func TestMain(m *testing.M) { framework.Main(m) }

// svm runs the svm command line in the test process.
// svm runs the command line in-process (framework.SVM).
var svm = framework.SVM

func TestMigrateCustomResources(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)
	r := env.NewResource(t)
	const n = 600 // six chunks, over five namespaces
	var namespaces []string
	for _, s := range []string{"a", "b", "c", "d", "e"} {
		namespaces = append(namespaces, framework.TestName(t)+"-"+s)
	}
	before := env.StoredInOldVersion(t, r, namespaces, n)

	code, stdout, stderr := svm(t, "migrate", "--kubeconfig", kubeconfig, r.CRDName(), "--chunk-size", "100", "--workers", "8")
	if code != 0 {
		t.Fatalf("svm migrate exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if want := fmt.Sprintf("%s: done: %d listed: migrated %d (re-stored %d, already current 0), written since the start 0, gone 0, failed 0 in ", r.CRDName(), n, n, n); !strings.Contains(stdout, want) {
		t.Errorf("summary missing %q in:\n%s", want, stdout)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	env.ExpectUnchanged(t, r.GVR("v1"), before)
}

// TestMigrateBadInput writes nothing: every command fails before it
// migrates, or (forbidden) migrates nothing.
func TestMigrateBadInput(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	dir := t.TempDir()
	kubeconfig := env.KubeconfigFile(t)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"unknown resource", []string{"migrate", "--kubeconfig", kubeconfig, "gadgets.example.com"}, `svm: resource "gadgets.example.com": the server does not serve it`},
		{"no resource", []string{"migrate", "--kubeconfig", kubeconfig}, "svm: name the resources to migrate, or pass --all (not both)"},
		{"resources and --all", []string{"migrate", "--kubeconfig", kubeconfig, "--all", "secrets"}, "svm: name the resources to migrate, or pass --all (not both)"},
		{"bad workers", []string{"migrate", "--kubeconfig", kubeconfig, "--workers", "0", "secrets"}, "svm: --workers must be at least 1, got 0"},
		{"missing kubeconfig", []string{"migrate", "--kubeconfig", filepath.Join(dir, "nope"), "secrets"}, "svm: load kubeconfig: "},
		{"forbidden", []string{"migrate", "--kubeconfig", kubeconfig, "--as", "nobody", "secrets"}, "svm: 1 of 1 resources were not fully migrated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := svm(t, tt.args...)
			if code == 0 {
				t.Fatalf("exit code 0, want failure; stdout:\n%s", stdout)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, tt.wantErr) {
				t.Errorf("last stderr line %q, want prefix %q", last, tt.wantErr)
			}
		})
	}
}

// TestMigrateAll migrates everything the server serves, so it has a
// control plane of its own.
func TestMigrateAll(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)
	env.CreateWidgetCRD(t, "v1")
	env.CreateWidgets(t, "v1", []string{"default"}, 100)
	hash := env.StorageVersionHash(t, framework.Widgets)
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	env.WaitStorageVersionHashChange(t, framework.Widgets, hash)
	// An aggregated API server's objects, left in an older version.
	env.StartSampleAPIServer(t)
	env.CreateFlunders(t, "wardle", 20)
	env.StoreFlundersAsV1beta1(t)

	code, stdout, stderr := svm(t, "migrate", "--kubeconfig", kubeconfig, "--all")
	if code != 0 {
		t.Fatalf("svm migrate --all exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	// Custom, aggregated and built-in resources alike, each with its
	// summary line.
	for _, want := range []string{"widgets.example.com: done: 100 listed: migrated 100 (re-stored 100,", "flunders.wardle.example.com: done: 20 listed: migrated 20 (re-stored 20,",
		"namespaces: done: ", "customresourcedefinitions.apiextensions.k8s.io: done: 1 listed: migrated 1 ", "clusterroles.rbac.authorization.k8s.io: done: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	env.ExpectStored(t, framework.EtcdPrefix(framework.Widgets.GroupResource()), map[string]int{"example.com/v2": 100})
	env.ExpectStored(t, framework.SampleAPIEtcdPrefix("flunders"), map[string]int{framework.Flunders.GroupVersion().String(): 20})
	// Every resource once; events and events.events.k8s.io share storage.
	seen := map[string]int{}
	for _, line := range strings.Split(stdout, "\n") {
		if name, _, ok := strings.Cut(line, ": done: "); ok {
			seen[name]++
		}
	}
	for name, count := range seen {
		if count != 1 {
			t.Errorf("%s migrated %d times", name, count)
		}
	}
	if seen["events"] != 1 || seen["events.events.k8s.io"] != 0 {
		t.Errorf("events migrated %d times and events.events.k8s.io %d times, want the shared storage once", seen["events"], seen["events.events.k8s.io"])
	}
	if len(seen) < 30 {
		t.Errorf("only %d resources migrated: %v", len(seen), seen)
	}
}
