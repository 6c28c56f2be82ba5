package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/status"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestStatus runs `svm status` against a control plane holding migrations
// in every state: two finished by the real controller (one succeeded, one
// failed on a resource that does not exist), three whose status the test
// writes as the controller would mid-way (running with an estimate,
// retrying, pending), an in-tree one, and two StorageStates.
//
// It counts every migration, runs svm's controller and starts without
// svm's CRDs, so it has a control plane of its own.
func TestStatus(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)
	ctx := framework.Context(t, 10*time.Minute)

	// storagemigration.k8s.io/v1 is GA and served by default in v1.37, so
	// the test needs it rather than skipping without it. No
	// kube-controller-manager runs here, so the migration stays Pending.
	if _, err := env.Discovery.ServerResourcesForGroupVersion(storagemigrationv1.SchemeGroupVersion.String()); err != nil {
		t.Fatalf("the server does not serve %s: %v", storagemigrationv1.SchemeGroupVersion, err)
	}
	env.CreateInTreeMigration(t, "intree-secrets", schema.GroupResource{Resource: "secrets"})

	t.Run("without svm's CRDs", func(t *testing.T) {
		code, stdout, stderr := svm(t, "status", "--kubeconfig", kubeconfig)
		if code != 0 {
			t.Fatalf("svm status exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if want := "note: svm's CRDs are not installed (migration.k8s.io/v1alpha1 is not served); showing in-tree migrations only\n"; stderr != want {
			t.Errorf("stderr %q, want %q", stderr, want)
		}
		rows := tableRows(t, stdout)
		expectRow(t, rows, "intree-secrets", "secrets", "in-tree", "Pending", "-")
		if len(rows) != 1 || strings.Contains(stdout, "CURRENT HASH") {
			t.Errorf("want the in-tree migration alone and no storage states:\n%s", stdout)
		}
	})

	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateWidgetCRD(t, "v1")
	env.CreateWidgets(t, "v1", []string{"default"}, 30)
	env.CreateMigration(t, "widgets-done", framework.Widgets)
	env.CreateMigration(t, "gadgets-missing", framework.Widgets.GroupVersion().WithResource("gadgets"))
	controller := env.StartSVM(t, framework.ControllerArgs("--trigger=false")...)
	for _, name := range []string{"widgets-done", "gadgets-missing"} {
		env.WaitMigration(t, name, 3*time.Minute, "finished", framework.Finished)
	}
	// Stopped, so that it leaves alone the Running migrations made up
	// below.
	if !controller.Stop(time.Minute) {
		t.Fatal("the controller did not stop within a minute")
	}

	started := metav1.NewTime(time.Now().Add(-100 * time.Second))
	env.WriteMigrationStatus(t, env.CreateMigration(t, "widgets-running", framework.Widgets), migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{{Type: migrationv1alpha1.MigrationRunning, Status: corev1.ConditionTrue, Reason: "Started", LastUpdateTime: started}},
		Progress:   migrationv1alpha1.MigrationProgress{Listed: 300, Restored: 200, AlreadyCurrent: 50, WrittenSinceStart: 8, WrittenSinceChange: 30, Gone: 2, RemainingEstimate: ptr.To[int64](700)},
		StartTime:  &started,
	})
	env.WriteMigrationStatus(t, env.CreateMigration(t, "secrets-retrying", secrets), migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{{
			Type: migrationv1alpha1.MigrationRunning, Status: corev1.ConditionTrue, Reason: "Retrying", LastUpdateTime: started,
			Message: "list secrets: the server is currently unable to handle the request",
		}},
		Progress:  migrationv1alpha1.MigrationProgress{Listed: 50, Restored: 40},
		StartTime: &started,
	})
	env.CreateMigration(t, "configmaps-pending", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	hash := env.StorageVersionHash(t, framework.Widgets)
	createStorageState(t, env, "example.com", "widgets", hash, []string{hash})
	createStorageState(t, env, "", "secrets", "k6S1K8hGv1A=", []string{migrationv1alpha1.UnknownStorageVersionHash})

	t.Run("wide", func(t *testing.T) {
		code, stdout, stderr := svm(t, "status", "--kubeconfig", kubeconfig, "-o", "wide")
		if code != 0 || stderr != "" {
			t.Fatalf("svm status -o wide exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		rows := tableRows(t, stdout)
		// MIGRATED, then re-stored, already current, written since the
		// start, written since the change, gone, failed. The widgets
		// migrated for real were never in another version: the API server
		// kept every one as it was.
		expectRow(t, rows, "widgets-running", "widgets.example.com", "svm", "Running", "250/1000", "200", "50", "8", "30", "2", "0")
		expectRow(t, rows, "widgets-done", "widgets.example.com", "svm", "Succeeded", "30/30", "0", "30", "0", "0", "0", "0")
		expectRow(t, rows, "intree-secrets", "secrets", "in-tree", "Pending", "-", "-", "-", "-", "-", "-", "-")
	})
	t.Run("table", func(t *testing.T) {
		code, stdout, stderr := svm(t, "status", "--kubeconfig", kubeconfig)
		if code != 0 || stderr != "" {
			t.Fatalf("svm status exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		t.Logf("svm status:\n%s", stdout)
		rows := tableRows(t, stdout)
		expectRow(t, rows, "widgets-running", "widgets.example.com", "svm", "Running", "250/1000")
		expectRow(t, rows, "secrets-retrying", "secrets", "svm", "Retrying", "40/50+")
		expectRow(t, rows, "configmaps-pending", "configmaps", "svm", "Pending", "-")
		expectRow(t, rows, "intree-secrets", "secrets", "in-tree", "Pending", "-")
		expectRow(t, rows, "gadgets-missing", "gadgets.example.com", "svm", "Failed", "0/0")
		expectRow(t, rows, "widgets-done", "widgets.example.com", "svm", "Succeeded", "30/30")
		// Moving first, finished last.
		var order []string
		for _, line := range strings.Split(stdout, "\n")[1:7] {
			order = append(order, strings.Fields(line)[0])
		}
		want := []string{"widgets-running", "secrets-retrying", "intree-secrets", "configmaps-pending", "gadgets-missing", "widgets-done"}
		if diff := cmp.Diff(want, order); diff != "" {
			t.Errorf("row order (-want +got):\n%s", diff)
		}
		// 290 objects in about 100s: an ETA, and the errors in LAST ERROR.
		if eta := rows["widgets-running"][6]; eta == "-" {
			t.Errorf("no ETA for the running migration: %q", rows["widgets-running"])
		}
		if line := rows["gadgets-missing"]; !strings.Contains(strings.Join(line, " "), "the server does not serve") {
			t.Errorf("the failed migration's row does not say why: %q", line)
		}
		if line := rows["secrets-retrying"]; !strings.Contains(strings.Join(line, " "), "list secrets: the server") {
			t.Errorf("the retrying migration's row does not say why: %q", line)
		}
		expectRow(t, rows, "widgets.example.com", hash, hash, "yes")
		expectRow(t, rows, "secrets", "k6S1K8hGv1A=", "Unknown", "no")
	})

	t.Run("json", func(t *testing.T) {
		code, stdout, stderr := svm(t, "status", "--kubeconfig", kubeconfig, "-o", "json")
		if code != 0 || stderr != "" {
			t.Fatalf("svm status -o json exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		r := decodeReport(t, []byte(stdout))
		checkReport(t, r, hash)
	})

	t.Run("yaml", func(t *testing.T) {
		code, stdout, stderr := svm(t, "status", "--kubeconfig", kubeconfig, "-o", "yaml")
		if code != 0 || stderr != "" {
			t.Fatalf("svm status -o yaml exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		var r status.Report
		if err := yaml.UnmarshalStrict([]byte(stdout), &r); err != nil {
			t.Fatalf("decode the YAML: %v\n%s", err, stdout)
		}
		checkReport(t, &r, hash)
	})

	t.Run("watch", func(t *testing.T) {
		// The binary, so that the watch ends as it does for a user: on a
		// signal, with exit code 0. Its output is not a terminal, so it
		// prints plain lines.
		p := env.StartSVM(t, "status", "--watch", "--interval", "200ms")
		var log string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			log = string(p.Log(t))
			return strings.Count(log, "6 migrations: 1 running, 1 retrying, 2 pending, 1 failed, 1 succeeded") >= 2, nil
		})
		if err != nil {
			t.Fatalf("no two refreshes within two minutes; output:\n%s", log)
		}
		if !p.Stop(time.Minute) {
			t.Fatal("svm status --watch did not stop on SIGTERM")
		}
		if code := p.ExitCode(); code != 0 {
			t.Errorf("svm status --watch exited %d after SIGTERM\n%s", code, log)
		}
		for _, want := range []string{
			"widgets-running [######..................] 290/1000 migrated 250 (re-stored 200) skipped 40 failed 0, ",
			"secrets-retrying 40 migrated 40 (re-stored 40) skipped 0 failed 0, ",
			" retrying: list secrets: the server is currently unable to handle the request\n",
		} {
			if !strings.Contains(log, want) {
				t.Errorf("watch output lacks %q:\n%s", want, log)
			}
		}
		t.Logf("svm status --watch:\n%s", log)
		if strings.Contains(log, "\033[") {
			t.Errorf("terminal escapes in plain output:\n%q", log)
		}
	})

	t.Run("bad flags", func(t *testing.T) {
		for _, tt := range []struct {
			args    []string
			wantErr string
		}{
			{[]string{"-o", "xml"}, `svm: --output must be one of table, wide, json, yaml, got "xml"` + "\n"},
			{[]string{"--watch", "-o", "json"}, "svm: --watch shows progress lines and cannot be combined with --output json\n"},
			{[]string{"--watch", "--interval", "0s"}, "svm: --interval must be positive, got 0s\n"},
		} {
			code, stdout, stderr := svm(t, append([]string{"status", "--kubeconfig", kubeconfig}, tt.args...)...)
			if code != 1 || stdout != "" || stderr != tt.wantErr {
				t.Errorf("svm status %q: exit %d, stdout %q, stderr %q; want exit 1 and stderr %q", tt.args, code, stdout, stderr, tt.wantErr)
			}
		}
	})
}

// TestStatusErrors checks that what stops `svm status` before it reads
// anything is said in one line.
func TestStatusErrors(t *testing.T) {
	dir := t.TempDir()
	// A port nothing listens on: bound, then released.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["down"] = &clientcmdapi.Cluster{Server: "https://" + addr, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["down"] = &clientcmdapi.AuthInfo{Token: "x"}
	cfg.Contexts["down"] = &clientcmdapi.Context{Cluster: "down", AuthInfo: "down"}
	cfg.CurrentContext = "down"
	unreachable := filepath.Join(dir, "unreachable")
	if err := clientcmd.WriteToFile(*cfg, unreachable); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken")
	if err := os.WriteFile(broken, []byte("clusters: [this is not a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"unreachable server", []string{"--kubeconfig", unreachable}, "svm: reach the API server at https://" + addr + ": dial tcp " + addr + ": connect: connection refused"},
		{"missing kubeconfig", []string{"--kubeconfig", filepath.Join(dir, "nope")}, "svm: load kubeconfig: "},
		{"broken kubeconfig", []string{"--kubeconfig", broken}, "svm: load kubeconfig: "},
		{"unknown context", []string{"--kubeconfig", unreachable, "--context", "nope"}, "svm: load kubeconfig: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := svm(t, append([]string{"status"}, tt.args...)...)
			if code != 1 || stdout != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, stdout)
			}
			if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, tt.wantErr) {
				t.Errorf("stderr %q, want one line starting %q", stderr, tt.wantErr)
			}
		})
	}
}

// TestKubectlPlugin installs svm as kubectl-svm on PATH with the README's
// command and runs it through a real kubectl, as `kubectl svm`.
//
// Its comparisons cover every migration and StorageState on the control
// plane it shares: the package's other tests there create none (see
// TestMain), and its own are named after it.
func TestKubectlPlugin(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	kubectl := env.CP.BinPath("kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl is needed to run svm as a kubectl plugin (make kubectl builds it): %v", err)
	}
	kubeconfig := env.KubeconfigFile(t)
	name := framework.TestName(t)
	done, inTree := name+"-secrets", name+"-configmaps"
	// A StorageState of a resource of its own, which need not be served.
	state := schema.GroupResource{Group: name + ".example.com", Resource: "widgets"}
	start, end := metav1.NewTime(time.Now().Add(-time.Hour)), metav1.NewTime(time.Now().Add(-time.Hour+20*time.Second))
	env.WriteMigrationStatus(t, env.CreateMigration(t, done, secrets), migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions:     []migrationv1alpha1.MigrationCondition{{Type: migrationv1alpha1.MigrationSucceeded, Status: corev1.ConditionTrue, Reason: "AllObjectsRewritten", LastUpdateTime: end}},
		Progress:       migrationv1alpha1.MigrationProgress{Listed: 40, Restored: 38, WrittenSinceStart: 2},
		StartTime:      &start,
		CompletionTime: &end,
	})
	env.CreateInTreeMigration(t, inTree, schema.GroupResource{Resource: "configmaps"})
	createStorageState(t, env, state.Group, state.Resource, "k6S1K8hGv1A=", []string{"k6S1K8hGv1A="})

	// Installed by the README's command, as a user would.
	home, _ := installAsPrinted(t, readmePlugin)
	plugins := filepath.Join(home, "bin")
	expectVersion(t, filepath.Join(plugins, "kubectl-svm"))
	runKubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(framework.Context(t, 2*time.Minute), kubectl, args...)
		cmd.Env = append(os.Environ(), "PATH="+plugins+string(os.PathListSeparator)+os.Getenv("PATH"))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}

	// What kubectl svm shows is what svm shows. Ages may tick between the
	// two runs; the columns before them may not differ.
	pluginTable := runKubectl("svm", "status", "--kubeconfig", kubeconfig)
	code, svmTable, stderr := svm(t, "status", "--kubeconfig", kubeconfig)
	if code != 0 {
		t.Fatalf("svm status exited %d: %s", code, stderr)
	}
	if diff := cmp.Diff(leadingColumns(svmTable), leadingColumns(pluginTable)); diff != "" {
		t.Errorf("kubectl svm status differs from svm status (-svm +kubectl svm):\n%s\nkubectl svm status printed:\n%s", diff, pluginTable)
	}
	rows := tableRows(t, pluginTable)
	expectRow(t, rows, done, "secrets", "svm", "Succeeded", "38/40")
	expectRow(t, rows, inTree, "configmaps", "in-tree", "Pending", "-")
	expectRow(t, rows, state.String(), "k6S1K8hGv1A=", "k6S1K8hGv1A=", "yes")

	// Nothing here depends on the time the report was read at, so the
	// JSON is the same but for that.
	pluginReport := decodeReport(t, []byte(runKubectl("svm", "status", "--kubeconfig", kubeconfig, "-o", "json")))
	_, svmJSON, _ := svm(t, "status", "--kubeconfig", kubeconfig, "-o", "json")
	svmReport := decodeReport(t, []byte(svmJSON))
	pluginReport.Time, svmReport.Time = metav1.Time{}, metav1.Time{}
	if diff := cmp.Diff(svmReport, pluginReport); diff != "" {
		t.Errorf("kubectl svm status -o json differs (-svm +kubectl svm):\n%s", diff)
	}

	// Help shows the command as the user typed it.
	for args, want := range map[string]string{
		"svm --help":        "  kubectl svm [command]\n",
		"svm status --help": "  kubectl svm status [flags]\n",
	} {
		if out := runKubectl(strings.Fields(args)...); !strings.Contains(out, want) {
			t.Errorf("kubectl %s lacks %q:\n%s", args, want, out)
		}
	}
}

var secrets = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// createStorageState creates the StorageState of group/resource with the
// given hashes as its status, as svm's trigger would have written it.
func createStorageState(t *testing.T, env *framework.Env, group, resource, current string, persisted []string) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	gr := migrationv1alpha1.GroupResource{Group: group, Resource: resource}
	s := &migrationv1alpha1.StorageState{
		ObjectMeta: metav1.ObjectMeta{Name: migrationv1alpha1.StorageStateName(gr)},
		Spec:       migrationv1alpha1.StorageStateSpec{Resource: gr},
	}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatalf("create storage state %s: %v", s.Name, err)
	}
	s.Status = migrationv1alpha1.StorageStateStatus{
		CurrentStorageVersionHash: current, PersistedStorageVersionHashes: persisted, LastHeartbeatTime: metav1.Now(),
	}
	if err := env.Client.Status().Update(ctx, s); err != nil {
		t.Fatalf("write the status of storage state %s: %v", s.Name, err)
	}
}

// tableRows splits the rows of `svm status` into fields, keyed by their
// first: a migration's name or a storage state's resource.
func tableRows(t *testing.T, table string) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	for _, line := range strings.Split(table, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] == "NAME" || fields[0] == "RESOURCE" || strings.HasPrefix(line, "No ") {
			continue
		}
		if _, dup := rows[fields[0]]; dup {
			t.Fatalf("two rows for %s in:\n%s", fields[0], table)
		}
		rows[fields[0]] = fields
	}
	return rows
}

// expectRow checks the leading cells of the row keyed key.
func expectRow(t *testing.T, rows map[string][]string, key string, want ...string) {
	t.Helper()
	row, ok := rows[key]
	if !ok {
		t.Errorf("no row for %s", key)
		return
	}
	if diff := cmp.Diff(append([]string{key}, want...), row[:min(len(row), len(want)+1)]); diff != "" {
		t.Errorf("row %s (-want +got):\n%s", key, diff)
	}
}

// leadingColumns keeps, of every line, the cells that do not depend on
// the time: the first five of a migration (name to progress), the first
// four of a storage state (resource to migrated).
func leadingColumns(table string) [][]string {
	var out [][]string
	n := 5
	for _, line := range strings.Split(table, "\n") {
		if line == "" {
			n = 4
			continue
		}
		fields := strings.Fields(line)
		out = append(out, fields[:min(n, len(fields))])
	}
	return out
}

func decodeReport(t *testing.T, data []byte) *status.Report {
	t.Helper()
	var r status.Report
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("decode the report: %v\n%s", err, data)
	}
	return &r
}

// checkReport checks what TestStatus set up, as -o json and -o yaml give
// it.
func checkReport(t *testing.T, r *status.Report, hash string) {
	t.Helper()
	if r.Version != status.Version || !r.SVMAPIServed || !r.InTreeAPIServed {
		t.Errorf("version %q, svmAPIServed %v, inTreeAPIServed %v; want %q, true, true", r.Version, r.SVMAPIServed, r.InTreeAPIServed, status.Version)
	}
	byName := map[string]status.Migration{}
	for _, m := range r.Migrations {
		byName[m.Name] = m
	}
	if len(byName) != 6 {
		t.Errorf("%d migrations, want 6: %v", len(byName), byName)
	}
	for name, want := range map[string]status.State{
		"widgets-running": status.StateRunning, "secrets-retrying": status.StateRetrying,
		"configmaps-pending": status.StatePending, "intree-secrets": status.StatePending,
		"gadgets-missing": status.StateFailed, "widgets-done": status.StateSucceeded,
	} {
		if got := byName[name].State; got != want {
			t.Errorf("%s is %q, want %q", name, got, want)
		}
	}
	done := byName["widgets-done"]
	// A finished migration says nothing remains (the last chunk's estimate).
	// The widgets were never in another version: the API server kept
	// every one as it was.
	if diff := cmp.Diff(&status.Progress{Listed: 30, Migrated: 30, AlreadyCurrent: 30, RemainingEstimate: ptr.To[int64](0), Total: 30, TotalKnown: true}, done.Progress); diff != "" {
		t.Errorf("progress of widgets-done (-want +got):\n%s", diff)
	}
	// 30 objects take well under a second, and the API's times have
	// seconds: no rate can be told.
	if done.StartTime == nil || done.CompletionTime == nil {
		t.Errorf("widgets-done lacks its start or completion time: %+v", done)
	}
	if m := byName["gadgets-missing"]; m.Reason != "ResourceNotFound" || !strings.Contains(m.Message, "the server does not serve") {
		t.Errorf("gadgets-missing failed with %q: %q; want ResourceNotFound", m.Reason, m.Message)
	}
	if m := byName["widgets-running"]; m.Progress == nil || m.Progress.Total != 1000 || !m.Progress.TotalKnown || m.ETASeconds == nil || *m.ETASeconds <= 0 {
		t.Errorf("widgets-running: want a total of 1000 and an ETA: %+v %+v", m, m.Progress)
	}
	if m := byName["secrets-retrying"]; m.Message != "list secrets: the server is currently unable to handle the request" || m.ETASeconds != nil {
		t.Errorf("secrets-retrying: want its message and no ETA: %+v", m)
	}
	if m := byName["intree-secrets"]; m.Source != status.SourceInTree || m.Progress != nil {
		t.Errorf("intree-secrets: want an in-tree row without progress: %+v", m)
	}
	var states []string
	for _, s := range r.StorageStates {
		states = append(states, s.Name+" "+s.CurrentStorageVersionHash+" "+strings.Join(s.PersistedStorageVersionHashes, ",")+" "+map[bool]string{true: "migrated", false: "not migrated"}[s.Migrated])
	}
	want := []string{"secrets k6S1K8hGv1A= Unknown not migrated", "widgets.example.com " + hash + " " + hash + " migrated"}
	if diff := cmp.Diff(want, states); diff != "" {
		t.Errorf("storage states (-want +got):\n%s", diff)
	}
}
