package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svm-project/svm/pkg/migrate"
)

// Rewrite every Secret after an encryption key rotation, gently.
func ExampleResource() {
	cfg := ctrl.GetConfigOrDie()
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	res, err := migrate.Resource(context.Background(), cfg, secrets, migrate.Options{
		QPS: 50,
		OnProgress: func(p migrate.Progress) {
			fmt.Fprintf(os.Stderr, "%d of %d listed objects handled\n", p.Handled(), p.Listed)
		},
	})
	fmt.Println(res.Outcomes())

	var terminal *migrate.TerminalError
	var failed *migrate.ObjectsFailedError
	switch {
	case err == nil:
		fmt.Println("every Secret is stored under the current key")
	case errors.As(err, &failed):
		for _, f := range res.FailedObjects {
			fmt.Printf("not rewritten: %s/%s: %s\n", f.Namespace, f.Name, f.Reason)
		}
	case errors.As(err, &terminal):
		fmt.Println("cannot migrate secrets:", terminal.Reason, err)
	case migrate.IsTransient(err):
		fmt.Println("the API server is unwell; run again later:", err)
	default:
		fmt.Println(err) // the context ended
	}
}

// After a release made v2 the storage version of widgets.example.com:
// migrate the widgets, then prune storedVersions so that the next release
// may drop v1.
func ExampleCRD() {
	cfg := ctrl.GetConfigOrDie()
	res, err := migrate.CRD(context.Background(), cfg, "widgets.example.com", migrate.Options{})
	if err != nil {
		fmt.Println("not done:", err)
	}
	fmt.Printf("storedVersions %v -> %v\n", res.StoredVersionsBefore, res.StoredVersionsAfter)
	if !res.Pruned {
		fmt.Println("not pruned:", res.NotPrunedReason)
	}
}

// An operator migrates its own CRDs each time it starts, on the leader
// only, beside its controllers.
func ExampleNewStartupMigrator() {
	cfg := ctrl.GetConfigOrDie()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{LeaderElection: true, LeaderElectionID: "widgets-operator"})
	if err != nil {
		panic(err)
	}
	migrator := migrate.NewStartupMigrator(cfg, []string{"widgets.example.com", "gadgets.example.com"}, migrate.StartupOptions{
		Options: migrate.Options{FieldManager: "widgets-operator"},
		OnResult: func(res migrate.CRDResult, err error) {
			// Export a metric or a condition here; the outcome is
			// logged already, through ctrl.Log.
		},
	})
	if err := mgr.Add(migrator); err != nil {
		panic(err)
	}
	// ... set up the operator's controllers ...
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		panic(err)
	}
}
