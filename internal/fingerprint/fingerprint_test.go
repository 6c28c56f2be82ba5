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
			got := Of(tc.crd, tc.sv)
			if got.Value != tc.want || got.Disagreement != tc.disagreed {
				t.Errorf("Of = %+v, want value %q, disagreement %q", got, tc.want, tc.disagreed)
			}
		})
	}
}

func TestSameStorage(t *testing.T) {
	base := Of(crd("u1", 3, "v2", "v1", "v2"), sv("42", nil)).Value
	for _, tc := range []struct {
		name string
		a, b string
		want bool
	}{
		{name: "identical", a: base, b: base, want: true},
		{name: "storedVersions pruned: not part of it", a: base, b: Of(crd("u1", 3, "v2", "v2"), sv("42", nil)).Value, want: true},
		{name: "another generation, same storage version (a flip and a flip back)", a: base, b: Of(crd("u1", 5, "v2", "v1", "v2"), sv("42", nil)).Value},
		{name: "another storage version", a: base, b: Of(crd("u1", 3, "v1", "v1", "v2"), sv("42", nil)).Value},
		{name: "the CRD deleted and created again", a: base, b: Of(crd("u2", 3, "v2", "v1", "v2"), sv("42", nil)).Value},
		{name: "the CRD deleted", a: base, b: Of(nil, sv("42", nil)).Value, want: true},
		{name: "the CRD deleted, and the StorageVersion object changed", a: base, b: Of(nil, sv("43", nil)).Value},
		{name: "a CRD created", a: Of(nil, sv("42", nil)).Value, b: base},
		{name: "the StorageVersion object changed", a: base, b: Of(crd("u1", 3, "v2", "v1", "v2"), sv("43", nil)).Value},
		{name: "discovery alone both times", a: "", b: "", want: true},
		{name: "the form svm wrote before the UID", a: "crd=3/v2", b: Of(crd("u1", 3, "v2", "v2"), nil).Value},
		{name: "the form svm wrote before, unchanged", a: "crd=1/v2", b: "crd=1/v2", want: true},
		{name: "the form svm wrote before, the CRD deleted", a: "crd=1/v2,storageversion=10", b: "storageversion=10", want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SameStorage(tc.a, tc.b); got != tc.want {
				t.Errorf("SameStorage(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}
