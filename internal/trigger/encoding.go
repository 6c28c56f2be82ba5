package trigger

import (
	"slices"
	"strings"

	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/resources"
)

// EncodingOf is what a StorageVersion object says about a resource of kind:
// the hash of the version every API server encodes it in, or none while
// they disagree, and the hashes of every version any of them reports. The
// hashes are discovery's (group, version and kind of the encoding), so they
// compare with storageVersionHash and StorageStates. It returns nil when no
// API server has reported yet: the object then says nothing.
func EncodingOf(sv *apiserverinternalv1alpha1.StorageVersion, kind string) *Encoding {
	if sv == nil || len(sv.Status.StorageVersions) == 0 {
		return nil
	}
	hash := func(encodingVersion string) string {
		gv, err := schema.ParseGroupVersion(encodingVersion)
		if err != nil {
			return ""
		}
		return resources.StorageVersionHash(gv.Group, gv.Version, kind)
	}
	e := &Encoding{}
	for _, s := range sv.Status.StorageVersions {
		if h := hash(s.EncodingVersion); h != "" && !slices.Contains(e.Reported, h) {
			e.Reported = append(e.Reported, h)
		}
	}
	// commonEncodingVersion is set by the servers when their entries agree;
	// an entry the object's writer has not recomputed for is caught by
	// checking the entries too.
	if c := sv.Status.CommonEncodingVersion; c != nil && len(e.Reported) == 1 && hash(*c) == e.Reported[0] {
		e.Common = e.Reported[0]
	}
	slices.Sort(e.Reported)
	if e.Common == "" {
		e.Disagreement = truncate("API servers encode it in different versions (StorageVersion API): "+encodings(sv), maxDisagreement)
	}
	return e
}

// encodings says which API server encodes in which version, as sv's
// entries tell.
func encodings(sv *apiserverinternalv1alpha1.StorageVersion) string {
	parts := make([]string, 0, len(sv.Status.StorageVersions))
	for _, s := range sv.Status.StorageVersions {
		parts = append(parts, s.APIServerID+" in "+s.EncodingVersion)
	}
	return strings.Join(parts, ", ")
}
