package fingerprint

import (
	"testing"

	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func crd(uid string, generation int64, storage string, stored ...string) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Generation: generation}}
	for _, v := range []string{"v1", "v2"} {
		c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v, Served: true, Storage: v == storage})
	}
	c.Status.StoredVersions = stored
	return c
}

func sv(rv string, common *string, encodings ...string) *apiserverinternalv1alpha1.StorageVersion {
	s := &apiserverinternalv1alpha1.StorageVersion{ObjectMeta: metav1.ObjectMeta{Name: "apps.deployments", ResourceVersion: rv}}
	s.Status.CommonEncodingVersion = common
	for i, e := range encodings {
		s.Status.StorageVersions = append(s.Status.StorageVersions, apiserverinternalv1alpha1.ServerStorageVersion{APIServerID: string(rune('a' + i)), EncodingVersion: e})
	}
	return s
}

// of is the fingerprint of a read that knows of no earlier one.
func of(c *apiextensionsv1.CustomResourceDefinition, s *apiserverinternalv1alpha1.StorageVersion) string {
	return NewEpochs().Of(c, s).Value
}

func TestOf(t *testing.T) {
	v1 := "apps/v1"
	for _, tc := range []struct {
		name            string
		crd             *apiextensionsv1.CustomResourceDefinition
		sv              *apiserverinternalv1alpha1.StorageVersion
		want, disagreed string
	}{
		{name: "neither"},
		{name: "a CRD", crd: crd("u1", 3, "v2", "v2", "v1"), want: "crd=u1/3/v2"},
		{name: "a StorageVersion object", sv: sv("42", &v1, "apps/v1"), want: "storageversion=42"},
		{name: "both", crd: crd("u1", 3, "v2", "v2"), sv: sv("42", nil), want: "crd=u1/3/v2,storageversion=42"},
		{name: "servers that disagree", sv: sv("7", nil, "apps/v1", "apps/v1beta2"), want: "storageversion=7",
			disagreed: "API servers encode apps.deployments in different versions: apps/v1 (a), apps/v1beta2 (b)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, e := range []*Epochs{NewEpochs(), nil} {
				got := e.Of(tc.crd, tc.sv)
				if got.Value != tc.want || got.Disagreement != tc.disagreed {
					t.Errorf("Of = %+v, want value %q, disagreement %q", got, tc.want, tc.disagreed)
				}
			}
		})
	}
}

func TestSameStorage(t *testing.T) {
	base := of(crd("u1", 3, "v2", "v1", "v2"), sv("42", nil))
	for _, tc := range []struct {
		name string
		a, b string
		want bool
	}{
		{name: "identical", a: base, b: base, want: true},
		{name: "storedVersions pruned: not part of it", a: base, b: of(crd("u1", 3, "v2", "v2"), sv("42", nil)), want: true},
		{name: "the next generation, same storage version: one spec change, no flip", a: base, b: of(crd("u1", 4, "v2", "v1", "v2"), sv("42", nil)), want: true},
		{name: "two generations on, same storage version: a flip and a flip back may hide between", a: base, b: of(crd("u1", 5, "v2", "v1", "v2"), sv("42", nil))},
		{name: "generations seen one after another since", a: base, b: "crd=u1/3..9/v2,storageversion=42", want: true},
		{name: "an epoch begun right after the generation read", a: base, b: "crd=u1/4..9/v2,storageversion=42", want: true},
		{name: "an epoch begun later", a: base, b: "crd=u1/5..9/v2,storageversion=42"},
		{name: "read in the other order", a: "crd=u1/3..9/v2,storageversion=42", b: base, want: true},
		{name: "within one epoch", a: "crd=u1/2..6/v2", b: "crd=u1/2..9/v2", want: true},
		{name: "another storage version", a: base, b: of(crd("u1", 3, "v1", "v1", "v2"), sv("42", nil))},
		{name: "another storage version, next generation", a: base, b: of(crd("u1", 4, "v1", "v1", "v2"), sv("42", nil))},
		{name: "the CRD deleted and created again", a: base, b: of(crd("u2", 3, "v2", "v1", "v2"), sv("42", nil))},
		{name: "the CRD deleted", a: base, b: of(nil, sv("42", nil)), want: true},
		{name: "the CRD deleted, and the StorageVersion object changed", a: base, b: of(nil, sv("43", nil))},
		{name: "a CRD created", a: of(nil, sv("42", nil)), b: base},
		{name: "the StorageVersion object changed", a: base, b: of(crd("u1", 3, "v2", "v1", "v2"), sv("43", nil))},
		{name: "discovery alone both times", a: "", b: "", want: true},
		{name: "the form svm wrote before the UID", a: "crd=3/v2", b: of(crd("u1", 3, "v2", "v2"), nil)},
		{name: "the form svm wrote before the UID, unchanged", a: "crd=1/v2", b: "crd=1/v2", want: true},
		{name: "the form svm wrote before the UID, the CRD deleted", a: "crd=1/v2,storageversion=10", b: "storageversion=10", want: true},
		{name: "a range that cannot be", a: "crd=u1/5..3/v2", b: "crd=u1/3..5/v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SameStorage(tc.a, tc.b); got != tc.want {
				t.Errorf("SameStorage(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		fp         string
		generation int64
		want       bool
	}{
		{fp: "crd=u1/3..7/v2", generation: 3, want: true},
		{fp: "crd=u1/3..7/v2", generation: 7, want: true},
		{fp: "crd=u1/3..7/v2,storageversion=4", generation: 5, want: true},
		{fp: "crd=u1/3..7/v2", generation: 2},
		{fp: "crd=u1/3..7/v2", generation: 8},
		{fp: "crd=u1/7/v2", generation: 7, want: true},
		{fp: "crd=u1/7/v2", generation: 6},
		{fp: "storageversion=4", generation: 1},
		{fp: "", generation: 1},
	} {
		if got := Covers(tc.fp, tc.generation); got != tc.want {
			t.Errorf("Covers(%q, %d) = %v, want %v", tc.fp, tc.generation, got, tc.want)
		}
	}
}

func TestRecreated(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"crd=u1/3/v2", "crd=u1/3..4/v2", false},
		{"crd=u1/3/v2", "crd=u2/1/v2", true},
		{"crd=u1/3/v2,storageversion=7", "crd=u2/1/v2,storageversion=7", true},
		{"storageversion=7", "crd=u2/1/v2", true},
		{"crd=3/v2", "crd=u2/1/v2", true}, // written before the UID was part of it
		{"", "crd=u2/1/v2", false},        // nothing recorded: first sight
		{"crd=u1/3/v2", "", false},        // the CRD gone
		{"crd=u1/3/v2", "storageversion=7", false},
	} {
		if got := Recreated(tc.a, tc.b); got != tc.want {
			t.Errorf("Recreated(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestGenerationsUnseen(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"crd=u1/3/v2", "crd=u1/4/v2", false},      // one generation on: nothing between
		{"crd=u1/3/v2", "crd=u1/4..7/v2", false},   // seen one after another
		{"crd=u1/3/v2", "crd=u1/5/v2", true},       // generation 4 unseen
		{"crd=u1/3..4/v2", "crd=u1/6..9/v2", true}, // generation 5 unseen
		{"crd=u1/3/v2,storageversion=7", "crd=u1/5/v2,storageversion=8", true},
		{"crd=u1/3/v2,storageversion=7", "crd=u1/3/v2,storageversion=8", false}, // the StorageVersion object alone
		{"crd=u1/3/v2", "crd=u2/5/v2", false},                                   // another CRD: Recreated says so
		{"", "crd=u1/5/v2", false},                                              // nothing recorded: first sight
		{"crd=3/v2", "crd=u1/5/v2", false},                                      // a record that does not parse: Recreated
		{"crd=u1/3/v2", "", false},                                              // the CRD gone
	} {
		if got := GenerationsUnseen(tc.a, tc.b); got != tc.want {
			t.Errorf("GenerationsUnseen(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestCRDUID(t *testing.T) {
	if uid, ok := CRDUID("crd=u1/3..5/v2,storageversion=7"); !ok || uid != "u1" {
		t.Errorf("CRDUID = %q, %v; want u1", uid, ok)
	}
	if _, ok := CRDUID("crd=3/v2"); ok {
		t.Error("CRDUID of a fingerprint without a UID is ok")
	}
}
