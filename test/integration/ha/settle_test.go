package ha_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestCRDSettleWaitsForEveryServersDiscovery runs two API servers on one
// etcd and holds the second one's etcd connections for CRDs, so that it
// does not see the widgets' CRD move its storage version from v1 to v2 and
// goes on storing widgets written through it in v1, long after the settle
// delay. svm, given both servers' addresses, must see in the second
// server's discovery that it has not taken the change up: no migration to
// v2 while it has not, the StorageState naming it; once it has, svm
// migrates, and etcd holds every widget in v2, those written through the
// lagging server included.
func TestCRDSettleWaitsForEveryServersDiscovery(t *testing.T) {
	t.Parallel()
	const n, late = 50, 10
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"ns-a"}, n)
	proxy := framework.StartEtcdProxy(t, env.CP.EtcdURL, crdKeys)
	peer, err := env.CP.StartPeer(framework.Context(t, 3*time.Minute), "apiserver-b", "--etcd-servers="+proxy.URL)
	if err != nil {
		t.Fatalf("start the second API server: %v", err)
	}
	t.Cleanup(func() {
		proxy.Release()
		_ = peer.Stop()
	})
	const settle = 3 * time.Second
	env.StartSVM(t, framework.ControllerArgs("--leader-elect=false", "--trigger-interval", "2s", "--crd-settle-delay", settle.String(),
		"--apiserver-endpoints", env.CP.APIServerURL+","+peer.URL)...)
	env.WaitStorageState(t, framework.Widgets.GroupResource(), 2*time.Minute, "first migration", func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{hashV1})
	})

	proxy.Hold()
	flipped := time.Now()
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	env.WaitStorageVersionHashChange(t, framework.Widgets, hashV1)
	peerWidgets := dynamic.NewForConfigOrDie(peer.RESTConfig()).Resource(framework.Widgets).Namespace("ns-a")
	for i := range late {
		w := framework.Widget(framework.Widgets.Version, fmt.Sprintf("late-%03d", i), n+i)
		if _, err := peerWidgets.Create(framework.Context(t, time.Minute), w, metav1.CreateOptions{}); err != nil {
			t.Fatalf("write through the lagging server: %v", err)
		}
	}
	s := env.WaitStorageState(t, framework.Widgets.GroupResource(), time.Minute, "the lagging server named", func(s *migrationv1alpha1.StorageState) bool {
		return strings.Contains(s.Status.ServersDisagree, peer.URL)
	})
	t.Logf("StorageState says: %s", s.Status.ServersDisagree)
	// Many times the settle delay and the drain margin.
	time.Sleep(20 * time.Second)
	if ms := migrationsSince(t, env, flipped); len(ms) != 0 {
		t.Errorf("svm made migrations of widgets while a server had not taken up the CRD's storage version: %v", names(ms))
	}
	stored := env.StoredVersions(t, widgetsPrefix)
	if stored["example.com/v1"] < n+late {
		t.Fatalf("etcd holds %v; want the %d widgets written through the lagging server in v1 with the rest: the test proves nothing", stored, late)
	}

	proxy.Release()
	released := time.Now()
	framework.Eventually(t, "every widget stored in v2", 3*time.Minute, func(context.Context) (bool, error) {
		return maps.Equal(env.StoredVersions(t, widgetsPrefix), map[string]int{"example.com/v2": n + late}), nil
	})
	t.Logf("svm migrated the widgets %s after the lagging server was let go", time.Since(released).Round(time.Second))
	s = env.WaitStorageState(t, framework.Widgets.GroupResource(), time.Minute, "migrated to v2", func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{hashV2})
	})
	if s.Status.ServersDisagree != "" {
		t.Errorf("after the migration serversDisagree still says %q", s.Status.ServersDisagree)
	}
}

// migrationsSince are the migrations of widgets made at since or later.
func migrationsSince(t *testing.T, env *framework.Env, since time.Time) []migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var out []migrationv1alpha1.StorageVersionMigration
	for _, m := range migrationsOf(t, env, framework.Widgets.GroupResource()) {
		if !m.CreationTimestamp.Time.Before(since.Truncate(time.Second)) {
			out = append(out, m)
		}
	}
	return out
}
