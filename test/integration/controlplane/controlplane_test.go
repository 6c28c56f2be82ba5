// Package controlplane_test shows that the local control plane is the real
// thing svm's guarantees are tested against: a storage version flip changes
// discovery's hash but not the bytes already in etcd, and the API server and
// etcd survive being killed and restarted on the same data.
package controlplane_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

func TestStorageFlipLeavesStoredObjectsInOldVersion(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})

	version, err := env.Discovery.ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if version.GitVersion != "v1.37.2" {
		t.Errorf("/version gitVersion = %q, want v1.37.2", version.GitVersion)
	}

	// svm's own CRDs, as generated, install and are served.
	crds := env.InstallCRDs(t, framework.CRDBasesDir())
	if len(crds) != 2 {
		t.Errorf("installed %d CRDs from config/crd/bases, want 2", len(crds))
	}

	env.CreateWidgetCRD(t, "v1")
	const n = 50
	env.CreateWidgets(t, "v1", []string{"alpha", "beta", "gamma"}, n)
	prefix := framework.EtcdPrefix(framework.Widgets.GroupResource())
	if diff := cmp.Diff(map[string]int{"example.com/v1": n}, env.StoredVersions(t, prefix)); diff != "" {
		t.Fatalf("stored versions before flip (-want +got):\n%s", diff)
	}

	before := env.StorageVersionHash(t, framework.Widgets)
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	after := env.WaitStorageVersionHashChange(t, framework.Widgets, before)
	// The hashes are derived from the storage group/version/kind, as svm
	// computes them to name a CRD's storedVersions.
	if want := resources.StorageVersionHash("example.com", "v1", "Widget"); before != want {
		t.Errorf("storageVersionHash before the flip %q, want %q", before, want)
	}
	if want := resources.StorageVersionHash("example.com", "v2", "Widget"); after != want {
		t.Errorf("storageVersionHash after the flip %q, want %q", after, want)
	}

	// The flip alone rewrites nothing: every stored object is still v1.
	env.ExpectStored(t, prefix, map[string]int{"example.com/v1": n})

	// A new write is stored in v2, whatever version it was sent in, once
	// the handler that writes widgets has caught up with discovery (it lags
	// by a moment: the reason for svm's --crd-settle-delay).
	env.WaitWritesStoredIn(t, framework.WidgetResource, "v2")
	ctx := framework.Context(t, time.Minute)
	if _, err := env.Dynamic.Resource(framework.Widgets).Namespace("alpha").Create(ctx, framework.Widget("v1", "fresh", 999), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create fresh widget: %v", err)
	}
	env.ExpectStored(t, prefix+"alpha/fresh", map[string]int{"example.com/v2": 1})
}

func TestAPIServerAndEtcdSurviveKillAndRestart(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	env.CreateWidgetCRD(t, "v1")
	env.CreateWidgets(t, "v1", []string{"default"}, 20)
	want := names(env.List(t, framework.Widgets))

	ctx := framework.Context(t, 3*time.Minute)
	if err := env.CP.KillAPIServer(); err != nil {
		t.Fatalf("kill kube-apiserver: %v", err)
	}
	if env.CP.APIServerRunning() {
		t.Fatal("kube-apiserver still running after SIGKILL")
	}
	if _, err := env.Kube.Discovery().ServerVersion(); err == nil {
		t.Fatal("API server answered while killed")
	}
	if err := env.CP.StartAPIServer(ctx); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	env.WaitEstablished(t, framework.WidgetsCRDName)
	if diff := cmp.Diff(want, names(env.List(t, framework.Widgets))); diff != "" {
		t.Errorf("widgets after API server restart (-want +got):\n%s", diff)
	}

	// etcd too: killed, restarted on the same data directory, and the API
	// server (still running) reconnects by itself.
	if err := env.CP.KillEtcd(); err != nil {
		t.Fatalf("kill etcd: %v", err)
	}
	if err := env.CP.StartEtcd(ctx); err != nil {
		t.Fatalf("restart etcd: %v", err)
	}
	var got []string
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := env.Dynamic.Resource(framework.Widgets).List(ctx, metav1.ListOptions{})
		if err == nil {
			got = names(list.Items)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("API server did not recover after etcd restart: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("widgets after etcd restart (-want +got):\n%s", diff)
	}
}

func names(items []unstructured.Unstructured) []string {
	out := make([]string, 0, len(items))
	for _, item := range items {
		out = append(out, item.GetNamespace()+"/"+item.GetName())
	}
	return out
}
