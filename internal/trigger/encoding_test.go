package trigger

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"

	"github.com/svm-project/svm/internal/resources"
)

func TestEncodingOf(t *testing.T) {
	v1 := resources.StorageVersionHash("apps", "v1", "Deployment")
	v1beta2 := resources.StorageVersionHash("apps", "v1beta2", "Deployment")
	sv := func(common string, encodings ...string) *apiserverinternalv1alpha1.StorageVersion {
		s := &apiserverinternalv1alpha1.StorageVersion{}
		if common != "" {
			s.Status.CommonEncodingVersion = &common
		}
		for i, e := range encodings {
			s.Status.StorageVersions = append(s.Status.StorageVersions, apiserverinternalv1alpha1.ServerStorageVersion{
				APIServerID: string(rune('a' + i)), EncodingVersion: e,
			})
		}
		return s
	}
	const apart = "API servers encode it in different versions (StorageVersion API): a in apps/v1beta2, b in apps/v1"
	tests := []struct {
		name string
		sv   *apiserverinternalv1alpha1.StorageVersion
		want *Encoding
	}{
		{"no object", nil, nil},
		{"no server reported yet", sv(""), nil},
		{"one server", sv("apps/v1", "apps/v1"), &Encoding{Common: v1, Reported: []string{v1}}},
		{"two agree", sv("apps/v1", "apps/v1", "apps/v1"), &Encoding{Common: v1, Reported: []string{v1}}},
		{"two disagree", sv("", "apps/v1beta2", "apps/v1"), &Encoding{Reported: sorted(v1, v1beta2), Disagreement: apart}},
		{"a common version the entries contradict is no agreement", sv("apps/v1", "apps/v1beta2", "apps/v1"), &Encoding{Reported: sorted(v1, v1beta2), Disagreement: apart}},
		{"a garbled entry is ignored", sv("apps/v1", "apps/v1", "a/b/c"), &Encoding{Common: v1, Reported: []string{v1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, EncodingOf(tt.sv, "Deployment")); diff != "" {
				t.Errorf("EncodingOf (-want +got):\n%s", diff)
			}
		})
	}
	// The core group's encoding version has no group.
	core := EncodingOf(&apiserverinternalv1alpha1.StorageVersion{Status: apiserverinternalv1alpha1.StorageVersionStatus{
		CommonEncodingVersion: ptr("v1"), StorageVersions: []apiserverinternalv1alpha1.ServerStorageVersion{{APIServerID: "a", EncodingVersion: "v1"}},
	}}, "Secret")
	if want := resources.StorageVersionHash("", "v1", "Secret"); core == nil || core.Common != want {
		t.Errorf("secrets: %+v, want common %s", core, want)
	}
}

func sorted(a, b string) []string {
	if a > b {
		return []string{b, a}
	}
	return []string{a, b}
}
