package cli_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestMigrateSaysWhatEtcdSaw: svm migrate's counts say what happened in
// etcd. After a storage flip every widget is re-stored: every etcd key
// gets a new mod revision. Migrated again right after, every widget is
// already current: the API server stores nothing, no mod revision moves,
// and the summary says 0 re-stored.
func TestMigrateSaysWhatEtcdSaw(t *testing.T) {
	t.Parallel()
	const n = 300
	// The mod revisions counted are those under the resource's own etcd
	// prefix: on the shared control plane no other test writes there.
	env := framework.Shared(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)
	r := env.NewResource(t)
	env.CreateObjects(t, r, []string{framework.TestName(t) + "-a", framework.TestName(t) + "-b"}, n)
	env.SetStorage(t, r, "v2")
	prefix := r.EtcdPrefix()

	for _, run := range []struct {
		name              string
		restored, current int
	}{
		{name: "after the flip", restored: n},
		{name: "again", current: n},
	} {
		before := env.ModRevisions(t, prefix)
		code, stdout, stderr := svm(t, "migrate", "--kubeconfig", kubeconfig, r.CRDName())
		if code != 0 {
			t.Fatalf("%s: svm migrate exited %d\nstdout:\n%s\nstderr:\n%s", run.name, code, stdout, stderr)
		}
		want := fmt.Sprintf("%s: done: %d listed: migrated %d (re-stored %d, already current %d), written since the start 0, gone 0, failed 0 in ",
			r.CRDName(), n, n, run.restored, run.current)
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
		env.ExpectStored(t, prefix, map[string]int{r.Group + "/v2": n})
	}
}
