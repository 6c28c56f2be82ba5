package cli_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svm-project/svm/internal/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestMigrateSaysWhatEtcdSaw: svm migrate's counts say what happened in
// etcd. After a storage flip every widget is re-stored: every etcd key
// gets a new mod revision. Migrated again right after, every widget is
// already current: the API server stores nothing, no mod revision moves,
// and the summary says 0 re-stored.
func TestMigrateSaysWhatEtcdSaw(t *testing.T) {
	const n = 300
	env := framework.Start(t, controlplane.Options{})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.CP.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	env.CreateWidgetCRD(t, "v1")
	env.CreateWidgets(t, "v1", []string{"ns-a", "ns-b"}, n)
	hash := env.StorageVersionHash(t, framework.Widgets)
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	env.WaitStorageVersionHashChange(t, framework.Widgets, hash)
	prefix := framework.EtcdPrefix(framework.Widgets.GroupResource())

	for _, run := range []struct {
		name              string
		restored, current int
	}{
		{name: "after the flip", restored: n},
		{name: "again", current: n},
	} {
		before := env.ModRevisions(t, prefix)
		code, stdout, stderr := svm(t, "migrate", "--kubeconfig", kubeconfig, "widgets.example.com")
		if code != 0 {
			t.Fatalf("%s: svm migrate exited %d\nstdout:\n%s\nstderr:\n%s", run.name, code, stdout, stderr)
		}
		want := fmt.Sprintf("widgets.example.com: done: %d listed: migrated %d (re-stored %d, already current %d), written since the start 0, gone 0, failed 0 in ",
			n, n, run.restored, run.current)
		if !strings.Contains(stdout, want) {
			t.Errorf("%s: summary lacks %q:\n%s", run.name, want, stdout)
		}
		after := env.ModRevisions(t, prefix)
		moved := 0
		for key, rev := range before {
			if after[key] != rev {
				moved++
			}
		}
		if len(before) != n || len(after) != n || moved != run.restored {
			t.Errorf("%s: %d of %d etcd keys got a new mod revision (%d keys after), want %d: the count must say what etcd saw", run.name, moved, len(before), len(after), run.restored)
		}
		env.ExpectStored(t, prefix, map[string]int{"example.com/v2": n})
	}
}
