package resources

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestMigratable(t *testing.T) {
	verbs := metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	eventsHash := StorageVersionHash("", "v1", "Event")
	lists := []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "events", Kind: "Event", Verbs: verbs, StorageVersionHash: eventsHash},
			{Name: "pods", Kind: "Pod", Verbs: verbs, StorageVersionHash: "pods-hash"},
			{Name: "pods/status", Kind: "Pod", Verbs: metav1.Verbs{"get", "patch", "update"}},
			{Name: "bindings", Kind: "Binding", Verbs: metav1.Verbs{"create"}},
		}},
		{GroupVersion: "events.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "events", Kind: "Event", Verbs: verbs, StorageVersionHash: eventsHash}, // stored as core events
		}},
		{GroupVersion: "authentication.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "tokenreviews", Kind: "TokenReview", Verbs: metav1.Verbs{"create"}},
		}},
		{GroupVersion: "metrics.example.com/v1beta1", APIResources: []metav1.APIResource{
			{Name: "things", Kind: "Thing", Verbs: verbs}, // aggregated, no hash
		}},
	}
	want := []Resource{
		{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "events"}, Kind: "Event", StorageVersionHash: eventsHash},
		{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Kind: "Pod", StorageVersionHash: "pods-hash"},
		{GroupVersionResource: schema.GroupVersionResource{Group: "metrics.example.com", Version: "v1beta1", Resource: "things"}, Kind: "Thing"},
	}
	if diff := cmp.Diff(want, Migratable(lists)); diff != "" {
		t.Errorf("Migratable() (-want +got):\n%s", diff)
	}
}

func TestStorageVersionName(t *testing.T) {
	for gr, want := range map[schema.GroupResource]string{
		{Resource: "secrets"}:                    "core.secrets",
		{Group: "apps", Resource: "deployments"}: "apps.deployments",
	} {
		if got := StorageVersionName(gr); got != want {
			t.Errorf("StorageVersionName(%v) = %q, want %q", gr, got, want)
		}
	}
}

func TestStorageVersionHash(t *testing.T) {
	// Values the API server itself reports (seen in discovery).
	for _, tt := range []struct{ group, version, kind, want string }{
		{"", "v1", "Pod", "xPOwRZ+Yhw8="},
		{"apps", "v1", "Deployment", "8aSe+NMegvE="},
	} {
		if got := StorageVersionHash(tt.group, tt.version, tt.kind); got != tt.want {
			t.Errorf("StorageVersionHash(%q, %q, %q) = %q, want %q", tt.group, tt.version, tt.kind, got, tt.want)
		}
	}
}
