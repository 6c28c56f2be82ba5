package ha_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestCRDFlipSeenLateByOneServer runs two API servers on one etcd and
// stalls the second (SIGSTOP) while the widgets' CRD moves its storage
// version through the first. Clients keep writing widgets through the
// stalled server; it handles those writes when it runs again, racing its
// own view of the CRD, so some may be stored in the old version after the
// flip. svm, watching the first server, must not end with a StorageState
// that says every widget is in the new version while etcd still holds old
// ones: the settle delay makes its migration list after the lagging
// server's writes, and etcd is read at the end to check.
func TestCRDFlipSeenLateByOneServer(t *testing.T) {
	t.Parallel()
	const n, late = 100, 20
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"ns-a"}, n)
	peer, err := env.CP.StartPeer(framework.Context(t, 3*time.Minute), "apiserver-b")
	if err != nil {
		t.Fatalf("start the second API server: %v", err)
	}
	t.Cleanup(func() {
		_ = peer.Resume()
		_ = peer.Stop()
	})
	env.StartSVM(t, "controller", "--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--crd-drain-margin", framework.TestDrainMargin.String(), "--trigger-interval", "1s", "--crd-settle-delay", "10s")
	env.WaitStorageState(t, framework.Widgets.GroupResource(), 2*time.Minute, "first migration", func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{hashV1})
	})

	if err := peer.Pause(); err != nil {
		t.Fatal(err)
	}
	// Writes sent to the stalled server wait in its socket.
	peerClient := dynamic.NewForConfigOrDie(peer.RESTConfig()).Resource(framework.Widgets).Namespace("ns-a")
	var wg sync.WaitGroup
	errs := make(chan error, late)
	for i := range late {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			w := framework.Widget(framework.Widgets.Version, fmt.Sprintf("late-%03d", i), n+i)
			if _, err := peerClient.Create(ctx, w, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		})
	}
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	env.WaitStorageVersionHashChange(t, framework.Widgets, hashV1)
	time.Sleep(2 * time.Second)
	if err := peer.Resume(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("write through the second server: %v", err)
	}
	t.Logf("after the lagging server's writes, etcd holds %v", env.StoredVersions(t, widgetsPrefix))

	env.WaitStorageState(t, framework.Widgets.GroupResource(), 2*time.Minute, "migrated to v2", func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{hashV2})
	})
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n + late})
	framework.Scenario{Name: "CRD flip seen late by one server", Objects: n + late, Writes: -1, Retries: -1, Verified: !t.Failed()}.Report(t)
}
