package upgrade

import (
	"os"
	"regexp"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/resources"
)

func TestReleaseDecodes(t *testing.T) {
	gv := func(g, v string) schema.GroupVersion { return schema.GroupVersion{Group: g, Version: v} }
	cases := []struct {
		release     string
		group, kind string
		has, hasNot []schema.GroupVersion
	}{
		// k8s.io/api records resource.k8s.io/v1beta2 as removed in 1.39.
		{"1.37", "resource.k8s.io", "DeviceClass", []schema.GroupVersion{gv("resource.k8s.io", "v1"), gv("resource.k8s.io", "v1beta2")}, nil},
		{"1.38", "resource.k8s.io", "ResourceClaim", []schema.GroupVersion{gv("resource.k8s.io", "v1"), gv("resource.k8s.io", "v1beta2")}, nil},
		{"v1.39", "resource.k8s.io", "ResourceClaim", []schema.GroupVersion{gv("resource.k8s.io", "v1")}, []schema.GroupVersion{gv("resource.k8s.io", "v1beta2")}},
		{"1.40.1", "resource.k8s.io", "ResourceSlice", []schema.GroupVersion{gv("resource.k8s.io", "v1")}, []schema.GroupVersion{gv("resource.k8s.io", "v1beta2")}},
		// GA versions are never removed.
		{"1.60", "apps", "Deployment", []schema.GroupVersion{gv("apps", "v1")}, nil},
		{"1.60", "", "Secret", []schema.GroupVersion{gv("", "v1")}, nil},
		// Removed from serving in 1.22 (and still how CRDs are stored: see
		// TestFillFromRelease).
		{"1.39", "apiextensions.k8s.io", "CustomResourceDefinition", []schema.GroupVersion{gv("apiextensions.k8s.io", "v1")}, []schema.GroupVersion{gv("apiextensions.k8s.io", "v1beta1")}},
		// Not a kind of k8s.io/api: nothing is known to decode it.
		{"1.37", "example.com", "Widget", nil, nil},
	}
	for _, c := range cases {
		r, err := ParseRelease(c.release)
		if err != nil {
			t.Fatal(err)
		}
		got := r.Decodes(c.group, c.kind)
		for _, want := range c.has {
			if !slices.Contains(got, want) {
				t.Errorf("%s decodes %s %s in %v, want %s among them", c.release, c.group, c.kind, got, want)
			}
		}
		for _, not := range c.hasNot {
			if slices.Contains(got, not) {
				t.Errorf("%s decodes %s %s in %v, want no %s", c.release, c.group, c.kind, got, not)
			}
		}
		if c.has == nil && len(got) != 0 {
			t.Errorf("%s decodes %s %s in %v, want none", c.release, c.group, c.kind, got)
		}
	}
}

func TestParseRelease(t *testing.T) {
	for in, want := range map[string]Release{"1.39": {1, 39}, "v1.39": {1, 39}, "v1.35.4": {1, 35}, " 1.34 ": {1, 34}} {
		got, err := ParseRelease(in)
		if err != nil || got != want {
			t.Errorf("ParseRelease(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "39", "one.two", "v1"} {
		if _, err := ParseRelease(bad); err == nil {
			t.Errorf("ParseRelease(%q) accepted", bad)
		}
	}
}

func TestKnownThroughIsTheBuiltAPI(t *testing.T) {
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/api v0\.(\d+)\.`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod requires no k8s.io/api v0.x")
	}
	if want := "1." + string(m[1]); KnownThrough.String() != want {
		t.Errorf("KnownThrough is %s, but svm is built with k8s.io/api v0.%s: it is %s", KnownThrough, m[1], want)
	}
	if !BuiltIn("resource.k8s.io") || !BuiltIn("") || BuiltIn("example.com") {
		t.Error("BuiltIn misjudges resource.k8s.io, the core group or example.com")
	}
}

func TestFillFromRelease(t *testing.T) {
	hash := func(g, v, k string) string { return resources.StorageVersionHash(g, v, k) }
	widgets := apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{
		Group: "example.com", Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"},
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true}, {Name: "v2", Served: true, Storage: true}},
	}}
	in := Input{
		Target: Target{{Group: "apps", Resource: "deployments"}: {{Group: "apps", Version: "v1"}}},
		Discovery: Discovery{Resources: []DiscoveredResource{
			{GroupResource: schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, Kind: "DeviceClass", StorageVersionHash: hash("resource.k8s.io", "v1beta2", "DeviceClass")},
			{GroupResource: schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, Kind: "Event", StorageVersionHash: hash("", "v1", "Event")},
			{GroupResource: schema.GroupResource{Resource: "events"}, Kind: "Event", StorageVersionHash: hash("", "v1", "Event")},
			{GroupResource: schema.GroupResource{Group: "example.com", Resource: "widgets"}, Kind: "Widget", StorageVersionHash: hash("example.com", "v2", "Widget")},
			{GroupResource: schema.GroupResource{Group: "wardle.example.com", Resource: "flunders"}, Kind: "Flunder", StorageVersionHash: "abc"},
			{GroupResource: schema.GroupResource{Group: "metrics.k8s.io", Resource: "pods"}, Kind: "PodMetrics"},
			{GroupResource: schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, Kind: "TokenReview"},
			{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Kind: "Deployment", StorageVersionHash: hash("apps", "v1", "Deployment")},
			// Written as v1beta1, removed from serving in 1.22.
			{GroupResource: schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}, Kind: "CustomResourceDefinition", StorageVersionHash: hash("apiextensions.k8s.io", "v1beta1", "CustomResourceDefinition")},
		}},
		CRDs: []apiextensionsv1.CustomResourceDefinition{widgets},
	}
	if err := in.FillFromRelease(Release{1, 39}, Release{1, 34}); err != nil {
		t.Fatal(err)
	}
	gv := func(g, v string) schema.GroupVersion { return schema.GroupVersion{Group: g, Version: v} }
	want := Target{
		{Group: "apps", Resource: "deployments"}:              {gv("apps", "v1")}, // given, kept
		{Group: "example.com", Resource: "widgets"}:           {gv("example.com", "v1"), gv("example.com", "v2")},
		{Resource: "events"}:                                  {gv("", "v1")},
		{Group: "resource.k8s.io", Resource: "deviceclasses"}: in.Target[schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}],
		// The version the server still writes is decodable.
		{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}: {gv("apiextensions.k8s.io", "v1beta1"), gv("apiextensions.k8s.io", "v1")},
	}
	if diff := gocmp.Diff(want, in.Target); diff != "" {
		t.Errorf("target (-want +got):\n%s", diff)
	}
	if got := in.Target[schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}]; slices.Contains(got, gv("resource.k8s.io", "v1beta2")) || !slices.Contains(got, gv("resource.k8s.io", "v1")) {
		t.Errorf("1.39 decodes deviceclasses in %v, want v1 and not v1beta2", got)
	}
	if len(in.TargetUnknown) != 1 || in.TargetUnknown[schema.GroupResource{Group: "wardle.example.com", Resource: "flunders"}] == "" {
		t.Errorf("unknown %v, want the aggregated flunders alone", in.TargetUnknown)
	}
	if in.Release == nil || in.Release.To != "1.39" || in.Release.Server != "1.34" || len(in.Release.Limits) != 2 {
		t.Errorf("release %+v, want to 1.39 from 1.34 with both limits (1.39 is past k8s.io/api's %s)", in.Release, KnownThrough)
	}
	if err := (&Input{}).FillFromRelease(Release{1, 35}, Release{1, 37}); err == nil {
		t.Error("a downgrade was accepted")
	}
}
