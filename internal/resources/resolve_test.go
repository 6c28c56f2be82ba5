package resources

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

var allVerbs = metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}

// served is a server's discovery, each group's preferred version first, as
// DiscoverServed returns it: built-in resources, an aggregated metrics API
// whose pods cannot be patched, and the two CRDs of the report, widgets in
// a.example and b.example, both with short name amb and kind Widget.
func served() []*metav1.APIResourceList {
	eventsHash := StorageVersionHash("", "v1", "Event")
	widget := func(group, version string) metav1.APIResource {
		return metav1.APIResource{Name: "widgets", SingularName: "widget", Kind: "Widget", ShortNames: []string{"amb"}, Namespaced: true,
			Verbs: allVerbs, StorageVersionHash: StorageVersionHash(group, "v1", "Widget")}
	}
	return []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "events", SingularName: "event", Kind: "Event", ShortNames: []string{"ev"}, Verbs: allVerbs, StorageVersionHash: eventsHash},
			{Name: "pods", SingularName: "pod", Kind: "Pod", ShortNames: []string{"po"}, Verbs: allVerbs, StorageVersionHash: StorageVersionHash("", "v1", "Pod")},
			{Name: "pods/status", SingularName: "", Kind: "Pod", Verbs: metav1.Verbs{"get", "patch", "update"}},
			{Name: "secrets", SingularName: "secret", Kind: "Secret", Verbs: allVerbs, StorageVersionHash: StorageVersionHash("", "v1", "Secret")},
			{Name: "bindings", SingularName: "binding", Kind: "Binding", Verbs: metav1.Verbs{"create"}},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "deployments", SingularName: "deployment", Kind: "Deployment", ShortNames: []string{"deploy"}, Verbs: allVerbs, StorageVersionHash: StorageVersionHash("apps", "v1", "Deployment")},
		}},
		{GroupVersion: "events.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "events", SingularName: "event", Kind: "Event", Verbs: allVerbs, StorageVersionHash: eventsHash}, // stored as core events
		}},
		{GroupVersion: "autoscaling/v2", APIResources: []metav1.APIResource{
			{Name: "horizontalpodautoscalers", SingularName: "horizontalpodautoscaler", Kind: "HorizontalPodAutoscaler", ShortNames: []string{"hpa"}, Verbs: allVerbs, StorageVersionHash: "hpa-hash"},
		}},
		{GroupVersion: "autoscaling/v1", APIResources: []metav1.APIResource{
			{Name: "horizontalpodautoscalers", SingularName: "horizontalpodautoscaler", Kind: "HorizontalPodAutoscaler", ShortNames: []string{"hpa"}, Verbs: allVerbs, StorageVersionHash: "hpa-hash"},
		}},
		{GroupVersion: "storage.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "storageclasses", SingularName: "storageclass", Kind: "StorageClass", ShortNames: []string{"sc"}, Verbs: allVerbs, StorageVersionHash: "sc-hash"},
		}},
		{GroupVersion: "authentication.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "tokenreviews", SingularName: "tokenreview", Kind: "TokenReview", Verbs: metav1.Verbs{"create"}},
		}},
		{GroupVersion: "metrics.k8s.io/v1beta1", APIResources: []metav1.APIResource{
			{Name: "pods", SingularName: "", Kind: "PodMetrics", Verbs: metav1.Verbs{"get", "list"}},
		}},
		// Two aggregated APIs that report no storage hash: svm cannot
		// tell whether their things share storage.
		{GroupVersion: "x.example/v1", APIResources: []metav1.APIResource{{Name: "things", SingularName: "thing", Kind: "Thing", Verbs: allVerbs}}},
		{GroupVersion: "y.example/v1", APIResources: []metav1.APIResource{{Name: "things", SingularName: "thing", Kind: "Thing", Verbs: allVerbs}}},
		// Two create-only resources of one name: none can be migrated,
		// so none is preferred.
		{GroupVersion: "x.example/v1alpha1", APIResources: []metav1.APIResource{{Name: "reviews", Kind: "Review", Verbs: metav1.Verbs{"create"}}}},
		{GroupVersion: "y.example/v1alpha1", APIResources: []metav1.APIResource{{Name: "reviews", Kind: "Review", Verbs: metav1.Verbs{"create"}}}},
		// v2 is a.example's preferred version, so it comes first.
		{GroupVersion: "a.example/v2", APIResources: []metav1.APIResource{widget("a.example", "v2")}},
		{GroupVersion: "a.example/v1", APIResources: []metav1.APIResource{widget("a.example", "v1")}},
		{GroupVersion: "b.example/v2", APIResources: []metav1.APIResource{widget("b.example", "v2")}},
		{GroupVersion: "b.example/v1", APIResources: []metav1.APIResource{widget("b.example", "v1")}},
	}
}

func gvr(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}

// checkResolve holds Resolve(lists, failed, arg) to want, or to the error
// wantErr when that is set.
func checkResolve(t *testing.T, lists []*metav1.APIResourceList, failed map[schema.GroupVersion]error, arg string, want schema.GroupVersionResource, wantErr string) {
	t.Helper()
	got, err := Resolve(lists, failed, arg)
	if wantErr != "" {
		if err == nil || err.Error() != wantErr {
			t.Fatalf("Resolve(%q) = %v, %v; want error %q", arg, got.GroupVersionResource, err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("Resolve(%q): %v", arg, err)
	}
	if got.GroupVersionResource != want {
		t.Errorf("Resolve(%q) = %v, want %v", arg, got.GroupVersionResource, want)
	}
}

func TestResolve(t *testing.T) {
	const widgetsAmbiguous = "is ambiguous: it names widgets.a.example and widgets.b.example; name one in full"
	tests := []struct {
		name, arg string
		want      schema.GroupVersionResource
		wantErr   string
	}{
		{name: "plural", arg: "pods", want: gvr("", "v1", "pods")},
		{name: "singular", arg: "pod", want: gvr("", "v1", "pods")},
		{name: "short name", arg: "po", want: gvr("", "v1", "pods")},
		{name: "kind", arg: "Pod", want: gvr("", "v1", "pods")},
		{name: "kind, any case", arg: "storageClass", want: gvr("storage.k8s.io", "v1", "storageclasses")},
		{name: "plural, any case", arg: "PODS", want: gvr("", "v1", "pods")},
		{name: "plural and group", arg: "deployments.apps", want: gvr("apps", "v1", "deployments")},
		{name: "short name and group", arg: "deploy.apps", want: gvr("apps", "v1", "deployments")},
		{name: "kind and group", arg: "Deployment.apps", want: gvr("apps", "v1", "deployments")},
		{name: "group prefix, as kubectl", arg: "storageclass.storage", want: gvr("storage.k8s.io", "v1", "storageclasses")},
		{name: "group, version named", arg: "horizontalpodautoscalers.v1.autoscaling", want: gvr("autoscaling", "v1", "horizontalpodautoscalers")},
		{name: "core group, version named", arg: "pods.v1.", want: gvr("", "v1", "pods")},
		{name: "several versions: the preferred", arg: "hpa", want: gvr("autoscaling", "v2", "horizontalpodautoscalers")},
		{name: "several versions of a CRD: the preferred", arg: "widgets.a.example", want: gvr("a.example", "v2", "widgets")},
		{name: "CRD short name and group", arg: "amb.b.example", want: gvr("b.example", "v2", "widgets")},
		{name: "CRD kind and group", arg: "Widget.b.example", want: gvr("b.example", "v2", "widgets")},
		{name: "CRD version named", arg: "widgets.v1.a.example", want: gvr("a.example", "v1", "widgets")},
		{name: "CRD group prefix", arg: "widgets.a", want: gvr("a.example", "v2", "widgets")},

		{name: "ambiguous plural", arg: "widgets", wantErr: `resource "widgets" ` + widgetsAmbiguous},
		{name: "ambiguous singular", arg: "widget", wantErr: `resource "widget" ` + widgetsAmbiguous},
		{name: "ambiguous short name", arg: "amb", wantErr: `resource "amb" ` + widgetsAmbiguous},
		{name: "ambiguous kind", arg: "Widget", wantErr: `resource "Widget" ` + widgetsAmbiguous},
		{name: "kind alone, no singular", arg: "PodMetrics", want: gvr("metrics.k8s.io", "v1beta1", "pods")},
		{name: "group prefix picks out one", arg: "things.x", want: gvr("x.example", "v1", "things")},
		{name: "ambiguous without storage hashes", arg: "things", wantErr: `resource "things" is ambiguous: it names things.x.example and things.y.example; name one in full`},
		{name: "ambiguous, none migratable", arg: "reviews", wantErr: `resource "reviews" is ambiguous: it names reviews.x.example and reviews.y.example; name one in full`},

		{name: "shared storage: the core resource", arg: "events", want: gvr("", "v1", "events")},
		{name: "shared storage, by kind", arg: "Event", want: gvr("", "v1", "events")},
		{name: "shared storage, named in full", arg: "events.events.k8s.io", want: gvr("events.k8s.io", "v1", "events")},
		{name: "one candidate can be migrated", arg: "pods", want: gvr("", "v1", "pods")},
		{name: "the one that cannot, named in full", arg: "pods.metrics.k8s.io", want: gvr("metrics.k8s.io", "v1beta1", "pods")},
		{name: "a lone candidate that cannot be migrated", arg: "tokenreviews", want: gvr("authentication.k8s.io", "v1", "tokenreviews")},

		{name: "not served", arg: "gadgets", wantErr: `resource "gadgets": the server does not serve it`},
		{name: "not served in the group", arg: "deployments.batch", wantErr: `resource "deployments.batch": the server does not serve it`},
		{name: "a version alone is a group", arg: "widgets.v1", wantErr: `resource "widgets.v1": the server does not serve it`},
		{name: "not served in the version", arg: "widgets.v3.a.example", wantErr: `resource "widgets.v3.a.example": the server does not serve it`},
		{name: "a subresource", arg: "pods/status", wantErr: `resource "pods/status": the server does not serve it`},
		{name: "empty", arg: "", wantErr: `resource "": the server does not serve it`},
		{name: "only a group", arg: ".apps", wantErr: `resource ".apps": the server does not serve it`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResolve(t, served(), nil, tt.arg, tt.want, tt.wantErr)
		})
	}
}

func TestResolveReturnsDiscoveryFacts(t *testing.T) {
	got, err := Resolve(served(), nil, "ev")
	if err != nil {
		t.Fatal(err)
	}
	want := Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "events"}, Kind: "Event", StorageVersionHash: StorageVersionHash("", "v1", "Event")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Resolve(ev) (-want +got):\n%s", diff)
	}
}

func TestResolveExactGroupBeforePrefix(t *testing.T) {
	lists := []*metav1.APIResourceList{
		{GroupVersion: "a.example/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Verbs: allVerbs, StorageVersionHash: "a"}}},
		{GroupVersion: "a.example.org/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Verbs: allVerbs, StorageVersionHash: "b"}}},
	}
	// kubectl matches groups by prefix only when its own has no match.
	got, err := Resolve(lists, nil, "widgets.a.example")
	if err != nil || got.Group != "a.example" {
		t.Errorf("Resolve(widgets.a.example) = %v, %v; want widgets.a.example", got.GroupVersionResource, err)
	}
	// A prefix matching two groups guesses no more than a plural does.
	_, err = Resolve(lists, nil, "widgets.a")
	if want := `resource "widgets.a" is ambiguous: it names widgets.a.example and widgets.a.example.org; name one in full`; err == nil || err.Error() != want {
		t.Errorf("Resolve(widgets.a) error %v, want %q", err, want)
	}
}

// A group whose discovery failed may serve another candidate, so only names
// that cannot be in it resolve.
func TestResolveDiscoveryFailed(t *testing.T) {
	failed := func(gvs ...string) map[schema.GroupVersion]error {
		m := map[schema.GroupVersion]error{}
		for _, s := range gvs {
			gv, err := schema.ParseGroupVersion(s)
			if err != nil {
				t.Fatal(err)
			}
			m[gv] = errors.New("the server is currently unable to handle the request")
		}
		return m
	}
	without := func(groupVersions ...string) []*metav1.APIResourceList {
		var out []*metav1.APIResourceList
	next:
		for _, l := range served() {
			for _, gv := range groupVersions {
				if l.GroupVersion == gv {
					continue next
				}
			}
			out = append(out, l)
		}
		return out
	}
	tests := []struct {
		name    string
		lists   []*metav1.APIResourceList
		failed  map[schema.GroupVersion]error
		arg     string
		want    schema.GroupVersionResource
		wantErr string
	}{
		{
			name: "no group: any failed group may serve it", lists: without("metrics.k8s.io/v1beta1"), failed: failed("metrics.k8s.io/v1beta1"), arg: "secrets",
			wantErr: `resource "secrets": discovery failed for metrics.k8s.io/v1beta1, which may serve it too; retry, or name it in full as secrets.v1.`,
		},
		{name: "a core resource named in full", lists: without("metrics.k8s.io/v1beta1"), failed: failed("metrics.k8s.io/v1beta1"), arg: "secrets.v1.", want: gvr("", "v1", "secrets")},
		{
			name: "the other candidate's group failed", lists: without("b.example/v2", "b.example/v1"), failed: failed("b.example/v2", "b.example/v1"), arg: "amb",
			wantErr: `resource "amb": discovery failed for b.example/v1 and b.example/v2, which may serve it too; retry, or name it in full as widgets.a.example`,
		},
		{name: "another group failed", lists: without("b.example/v2", "b.example/v1"), failed: failed("b.example/v2", "b.example/v1"), arg: "widgets.a.example", want: gvr("a.example", "v2", "widgets")},
		{
			name: "its own group failed", lists: without("b.example/v2", "b.example/v1"), failed: failed("b.example/v2", "b.example/v1"), arg: "widgets.b.example",
			wantErr: `resource "widgets.b.example": discovery failed for b.example/v1 and b.example/v2, which may serve it; retry`,
		},
		{
			name: "another version of its group failed", lists: without("a.example/v2"), failed: failed("a.example/v2"), arg: "widgets.a.example",
			wantErr: `resource "widgets.a.example": discovery failed for a.example/v2, which may serve it too; retry, or name it in full as widgets.v1.a.example`,
		},
		{
			name: "a group its prefix may match failed", lists: without("b.example/v2", "b.example/v1"), failed: failed("b.example/v2", "b.example/v1"), arg: "widgets.b",
			wantErr: `resource "widgets.b": discovery failed for b.example/v1 and b.example/v2, which may serve it; retry`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResolve(t, tt.lists, tt.failed, tt.arg, tt.want, tt.wantErr)
		})
	}
}

func TestResolveAll(t *testing.T) {
	t.Run("once per storage, in the order named", func(t *testing.T) {
		got, err := ResolveAll(served(), nil, []string{"widgets.b.example", "events", "events.events.k8s.io", "ev", "amb.b.example", "po"})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range got {
			names = append(names, DisplayName(r.GroupResource()))
		}
		if diff := cmp.Diff([]string{"widgets.b.example", "events", "pods"}, names); diff != "" {
			t.Errorf("ResolveAll (-want +got):\n%s", diff)
		}
	})
	t.Run("nothing when any fails, every failure told", func(t *testing.T) {
		got, err := ResolveAll(served(), nil, []string{"widgets.a.example", "amb", "gadgets", "pods"})
		want := `resource "amb" is ambiguous: it names widgets.a.example and widgets.b.example; name one in full` + "\n" +
			`resource "gadgets": the server does not serve it`
		if err == nil || err.Error() != want || got != nil {
			t.Errorf("ResolveAll = %v, %v; want nothing and the error\n%s", got, err, want)
		}
	})
}

// stubDiscovery answers ServerGroupsAndResources; nothing else is called.
type stubDiscovery struct {
	discovery.DiscoveryInterface
	groups []*metav1.APIGroup
	lists  []*metav1.APIResourceList
	err    error
}

func (s stubDiscovery) ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	return s.groups, s.lists, s.err
}

func TestDiscoverServed(t *testing.T) {
	gv := func(s string) metav1.GroupVersionForDiscovery {
		v, _ := schema.ParseGroupVersion(s)
		return metav1.GroupVersionForDiscovery{GroupVersion: s, Version: v.Version}
	}
	list := func(s string) *metav1.APIResourceList { return &metav1.APIResourceList{GroupVersion: s} }
	groups := []*metav1.APIGroup{
		{Name: "", Versions: []metav1.GroupVersionForDiscovery{gv("v1")}, PreferredVersion: gv("v1")},
		// Listed oldest first, with the newest preferred.
		{Name: "a.example", Versions: []metav1.GroupVersionForDiscovery{gv("a.example/v1"), gv("a.example/v2"), gv("a.example/v3")}, PreferredVersion: gv("a.example/v2")},
	}
	broken := schema.GroupVersion{Group: "a.example", Version: "v3"}
	disc := stubDiscovery{
		groups: groups,
		lists:  []*metav1.APIResourceList{list("a.example/v1"), list("v1"), list("a.example/v2")},
		err:    &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{broken: errors.New("503")}},
	}
	lists, failed, err := DiscoverServed(disc)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, l := range lists {
		order = append(order, l.GroupVersion)
	}
	if diff := cmp.Diff([]string{"v1", "a.example/v2", "a.example/v1"}, order); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if _, ok := failed[broken]; !ok || len(failed) != 1 {
		t.Errorf("failed = %v, want only %v", failed, broken)
	}

	disc.err = errors.New("connection refused")
	if _, _, err := DiscoverServed(disc); err == nil || err.Error() != "discover resources: connection refused" {
		t.Errorf("DiscoverServed error %v, want discover resources: connection refused", err)
	}
}
