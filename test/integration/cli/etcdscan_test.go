package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svm-project/svm/internal/cli"
	"github.com/svm-project/svm/internal/etcdscan"
	"github.com/svm-project/svm/internal/etcdvalue"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestEtcdScan is the proof an operator reads before dropping an old
// encryption key: `svm etcd-scan` counts what etcd holds, as etcd holds
// it, before and after `svm migrate secrets` moves every Secret to the new
// key, and its --fail-on-key gate says when the old key is still needed.
// Nothing of the objects, neither their names nor their data nor their
// ciphertext, may show in what it prints. It restarts the API server with
// a new encryption configuration, on a control plane of its own.
func TestEtcdScan(t *testing.T) {
	t.Parallel()
	cfgDir := t.TempDir()
	key1, key2 := framework.NewEncryptionKey(t, "key1"), framework.NewEncryptionKey(t, "key2")
	env := framework.Start(t, controlplane.Options{APIServerFlags: []string{framework.WriteEncryptionConfig(t, cfgDir, key1)}})
	ctx := framework.Context(t, 5*time.Minute)
	kubeconfig := env.KubeconfigFile(t)

	// Names and data that must never appear in etcd-scan's output.
	var forbidden, markers []string
	namespaces := []string{"etcdscan-" + framework.NewMarker(t)[9:21], "etcdscan-" + framework.NewMarker(t)[9:21]}
	for _, ns := range namespaces {
		env.CreateNamespace(t, ns)
		forbidden = append(forbidden, ns)
	}
	const nSecrets, nConfigMaps = 60, 4
	for i := range nSecrets {
		marker := framework.NewMarker(t)
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%02d-%s", i, framework.NewMarker(t)[9:25]), Namespace: namespaces[i%2]},
			Data:       map[string][]byte{"password": []byte(marker)},
		}
		if _, err := env.Kube.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		forbidden, markers = append(forbidden, s.Name), append(markers, marker)
	}
	for i := range nConfigMaps {
		marker := framework.NewMarker(t)
		c := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%02d-%s", i, framework.NewMarker(t)[9:25]), Namespace: namespaces[i%2]},
			Data:       map[string]string{"setting": marker},
		}
		if _, err := env.Kube.CoreV1().ConfigMaps(c.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		forbidden, markers = append(forbidden, c.Name), append(markers, marker)
	}

	// Everything etcd-scan printed, to be searched for leaks at the end,
	// and the raw values whose ciphertext must not be in it.
	var printed []string
	run := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		code, stdout, stderr := svm(t, append([]string{"etcd-scan", "--endpoints", env.CP.EtcdURL}, args...)...)
		printed = append(printed, stdout, stderr)
		return code, stdout, stderr
	}
	// runProcess runs the svm binary, for the gates: their exit codes
	// end the process, which cli.Main would be in the test's.
	runProcess := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		code, stdout, stderr := framework.RunSVM(t, kubeconfig, time.Minute, append([]string{"etcd-scan", "--endpoints", env.CP.EtcdURL}, args...)...)
		printed = append(printed, stdout, stderr)
		return code, stdout, stderr
	}
	var rawValues [][]byte
	keepRaw := func() {
		for _, raw := range env.RawValues(t, "/registry/secrets/") {
			rawValues = append(rawValues, raw)
		}
	}

	// With key1: every Secret under it, every ConfigMap in plain text,
	// exactly as etcd's own values say, read over several pages.
	keepRaw()
	r := scanJSON(t, run, "--resource", "secrets", "--resource", "configmaps", "--page-size", "7")
	if diff := cmp.Diff(map[string]int{"aescbc:v1:key1": nSecrets}, r.counts["secrets"]); diff != "" {
		t.Errorf("secrets with key1 (-want +got):\n%s", diff)
	}
	if n := r.counts["configmaps"][etcdvalue.Identity]; n < nConfigMaps || len(r.counts["configmaps"]) != 1 {
		t.Errorf("configmaps with key1: %v, want %d or more, all identity", r.counts["configmaps"], nConfigMaps)
	}
	expectCountsMatchEtcd(t, env, r, "secrets", "configmaps")

	// The table says the same.
	code, stdout, stderr := run(t, "--resource", "secrets", "--resource", "configmaps")
	t.Logf("svm etcd-scan --resource secrets --resource configmaps:\n%s", stdout)
	if code != 0 || stderr != "" {
		t.Errorf("table: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		"RESOURCE     ENCRYPTION       VALUES\n",
		"\nsecrets      aescbc:v1:key1   60\n",
		fmt.Sprintf("\netcd revision %d: %d values under /registry/configmaps/, /registry/secrets/\n", r.Revision, r.Total),
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q", want)
		}
	}

	// The gate holds while key1 is in use; --fail-on-identity catches
	// the ConfigMaps; a key no value uses passes.
	if code, stdout, stderr := runProcess(t, "--resource", "secrets", "--fail-on-key", "key1"); code != cli.ExitUnsafe ||
		!strings.Contains(stderr, "svm: --fail-on-key key1: 60 values are still encrypted under key key1 (secrets 60)\n") {
		t.Errorf("--fail-on-key key1 before the migration: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, cli.ExitUnsafe, stdout, stderr)
	} else if !strings.Contains(stdout, "secrets    aescbc:v1:key1   60\n") {
		t.Errorf("--fail-on-key printed no summary:\n%s", stdout)
	}
	if code, _, stderr := runProcess(t, "--resource", "configmaps", "--fail-on-identity"); code != cli.ExitUnsafe || !strings.Contains(stderr, "svm: --fail-on-identity: ") {
		t.Errorf("--fail-on-identity on configmaps: exit %d, want %d; stderr %q", code, cli.ExitUnsafe, stderr)
	}
	if code, _, stderr := runProcess(t, "--resource", "secrets", "--fail-on-key", "key2", "--fail-on-identity"); code != 0 || stderr != "" {
		t.Errorf("--fail-on-key key2 before the migration: exit %d, stderr %q; want 0", code, stderr)
	}

	// All of /registry/: everything kube-apiserver stores is recognised
	// and placed under a resource.
	all := scanJSON(t, run)
	for res, byEnc := range all.counts {
		if res == etcdvalue.OtherResource || byEnc[etcdvalue.Unrecognised] > 0 {
			t.Errorf("scan of /registry/: %s: %v", res, byEnc)
		}
	}
	if all.counts["secrets"]["aescbc:v1:key1"] != nSecrets || all.Total <= r.Total {
		t.Errorf("scan of /registry/: secrets %v, total %d (of secrets and configmaps %d)", all.counts["secrets"], all.Total, r.Total)
	}

	// Rotate: key2 writes, key1 still reads; rewrite every Secret.
	env.CP.SetAPIServerFlags(framework.WriteEncryptionConfig(t, cfgDir, key2, key1))
	if err := env.CP.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := svm(t, "migrate", "--kubeconfig", kubeconfig, "secrets"); code != 0 {
		t.Fatalf("svm migrate secrets exited %d\n%s\n%s", code, stdout, stderr)
	}
	keepRaw()
	r = scanJSON(t, run, "--resource", "secrets", "--resource", "configmaps")
	if diff := cmp.Diff(map[string]int{"aescbc:v1:key2": nSecrets}, r.counts["secrets"]); diff != "" {
		t.Errorf("secrets after the migration (-want +got):\n%s", diff)
	}
	expectCountsMatchEtcd(t, env, r, "secrets", "configmaps")
	if code, stdout, stderr := runProcess(t, "--resource", "secrets", "--fail-on-key", "key1"); code != 0 || stderr != "" {
		t.Errorf("--fail-on-key key1 after the migration: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	// Nothing of the objects in anything printed: names, data (as is
	// and in base64), or any ciphertext.
	out := strings.Join(printed, "\n")
	for _, leak := range framework.FindLeaks("etcd-scan output", out, markers) {
		t.Errorf("%s holds %s (as %q)", leak.Where, leak.Marker, leak.Form)
	}
	for _, name := range forbidden {
		if strings.Contains(out, name) {
			t.Errorf("etcd-scan output names %q", name)
		}
	}
	if len(rawValues) != 2*nSecrets {
		t.Fatalf("kept %d raw values, want %d", len(rawValues), 2*nSecrets)
	}
	for _, raw := range rawValues {
		for _, prefix := range []string{"k8s:enc:aescbc:v1:key1:", "k8s:enc:aescbc:v1:key2:"} {
			after, ok := bytes.CutPrefix(raw, []byte(prefix))
			if !ok {
				continue
			}
			if len(after) < 16 {
				t.Fatalf("a value under %s holds %d bytes of ciphertext", prefix, len(after))
			}
			if strings.Contains(out, string(after[:16])) {
				t.Errorf("etcd-scan output holds ciphertext of a value under %s", prefix)
			}
		}
	}
}

// scanned is an etcd-scan report with its counts by resource and
// encryption label.
type scanned struct {
	*etcdscan.Report
	counts map[string]map[string]int
}

// scanJSON runs etcd-scan -o json with args, expects it to succeed, and
// decodes its report.
func scanJSON(t *testing.T, run func(*testing.T, ...string) (int, string, string), args ...string) scanned {
	t.Helper()
	code, stdout, stderr := run(t, append(args, "-o", "json")...)
	if code != 0 || stderr != "" {
		t.Fatalf("svm etcd-scan %v exited %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
	}
	r := &etcdscan.Report{}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(r); err != nil {
		t.Fatalf("decode the report: %v\n%s", err, stdout)
	}
	if r.Version != etcdscan.Version || r.Revision <= 0 {
		t.Errorf("report version %q revision %d", r.Version, r.Revision)
	}
	s := scanned{Report: r, counts: map[string]map[string]int{}}
	var total int64
	for _, c := range r.Counts {
		if s.counts[c.Resource] == nil {
			s.counts[c.Resource] = map[string]int{}
		}
		s.counts[c.Resource][c.Encryption] += int(c.Values)
		total += c.Values
	}
	if total != r.Total {
		t.Errorf("counts add up to %d, total says %d", total, r.Total)
	}
	return s
}

// expectCountsMatchEtcd compares what etcd-scan counted for resources
// with what the framework reads from etcd itself, in the framework's
// terms: "encrypted:<provider>:<key>", or the apiVersion of a plain value.
func expectCountsMatchEtcd(t *testing.T, env *framework.Env, r scanned, resources ...string) {
	t.Helper()
	for _, res := range resources {
		got := map[string]int{}
		for _, c := range r.Counts {
			switch {
			case c.Resource != res:
			case c.Key != "":
				got["encrypted:"+c.Provider+":"+c.Key] += int(c.Values)
			default:
				got[c.Encryption] += int(c.Values)
			}
		}
		want := map[string]int{}
		for k, n := range env.StoredVersions(t, "/registry/"+res+"/") {
			if !strings.HasPrefix(k, "encrypted:") {
				k = etcdvalue.Identity // an apiVersion: the value is plain text
			}
			want[k] += n
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: etcd-scan's counts against etcd's values (-etcd +etcd-scan):\n%s", res, diff)
		}
	}
}

// TestEtcdScanBadInput reads nothing: every command fails before it reads,
// or finds no etcd, and says why.
func TestEtcdScanBadInput(t *testing.T) {
	t.Parallel()
	nobody := "http://" + framework.FreeAddress(t)
	tests := []struct {
		name    string
		args    []string
		wantErr string
		// within bounds how long the command may take to fail.
		within time.Duration
	}{
		{"no endpoints", []string{"etcd-scan"}, `svm: required flag(s) "endpoints" not set`, 5 * time.Second},
		{"prefix outside /registry/", []string{"etcd-scan", "--endpoints", nobody, "--prefix", "/other"}, `svm: --prefix "/other": etcd-scan reads only what kube-apiserver stores, under /registry/`, 5 * time.Second},
		{"a built-in group", []string{"etcd-scan", "--endpoints", nobody, "--resource", "deployments.apps"}, `svm: --resource: resource "deployments.apps": kube-apiserver stores the built-in resources of every group under /registry/<resource>/; name it "deployments"`, 5 * time.Second},
		{"cert without key", []string{"etcd-scan", "--endpoints", "https://127.0.0.1:2379", "--cert", "client.crt"}, "svm: --cert and --key go together: give both or neither", 5 * time.Second},
		// Nothing listens: the short wait for etcd's first answer, not the
		// five minutes of --timeout, bounds the failure.
		{"unreachable", []string{"etcd-scan", "--endpoints", nobody}, "svm: read etcd at " + nobody + ": no answer within 10s; is etcd reachable there?", 20 * time.Second},
		{"unreachable within --timeout", []string{"etcd-scan", "--endpoints", nobody, "--timeout", "2s"}, "svm: read etcd at " + nobody + ": no answer within 2s; is etcd reachable there?", 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			code, stdout, stderr := svm(t, tt.args...)
			if took := time.Since(start); took > tt.within {
				t.Errorf("failed after %s, want within %s", took, tt.within)
			}
			if code == 0 || stdout != "" {
				t.Fatalf("exit code %d, want failure; stdout:\n%s", code, stdout)
			}
			if got := strings.TrimSpace(stderr); got != tt.wantErr {
				t.Errorf("stderr %q, want %q", got, tt.wantErr)
			}
		})
	}
}
