package controller_test

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/svm-project/svm/internal/cli"
	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/test/framework"
)

// TestControllerBuildsItsClientsOnce runs svm controller in this test's
// process, with every controller on (migrations, the trigger, the
// re-encryption), and counts the clients it built by the time it has
// executed a migration: one kubeclients.Set, and in it the two discovery
// clients: the one the engine, the re-encryption and the start-up checks
// ask, and the trigger's, which reads every group version at once under a
// rate limit of its own. (controller-runtime's manager and elector build their
// own, outside svm's code.) Not parallel: the count is the process's, and
// top-level tests that are not parallel run alone.
func TestControllerBuildsItsClientsOnce(t *testing.T) {
	const n = 50
	env, before := setup(t, n)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.CP.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	setsBefore, discoveryBefore := kubeclients.Built()

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var out, errOut bytes.Buffer
	var runErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		root := cli.NewRootCommand(&out, &errOut)
		root.SetArgs(append([]string{"--kubeconfig", kubeconfig}, framework.ControllerArgs("--leader-elect=false")...))
		runErr = root.ExecuteContext(ctx)
	}()
	stopped := false
	defer func() {
		if !stopped {
			stop()
			wg.Wait()
		}
	}()

	env.CreateMigration(t, "widgets", framework.Widgets)
	env.WaitMigrationSucceeded(t, "widgets", 2*time.Minute)
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	env.ExpectUnchanged(t, framework.Widgets, before)

	sets, discoveries := kubeclients.Built()
	if got := sets - setsBefore; got != 1 {
		t.Errorf("svm controller built %d client sets, want 1", got)
	}
	if got := discoveries - discoveryBefore; got != 2 {
		t.Errorf("svm controller built %d discovery clients, want 2 (its set's: Discovery and BulkDiscovery)", got)
	}

	stop()
	wg.Wait()
	stopped = true
	if runErr != nil {
		t.Errorf("svm controller returned %v after it was stopped, want nil; its output:\n%s%s", runErr, out.String(), errOut.String())
	}
}
