// Package fingerprint says, in one string, what decides the version a
// resource's objects are written in: for a custom resource its CRD (which
// CRD, at which generation, with which storage version), and the
// resource's StorageVersion object where the API servers keep one. Two fingerprints read at two moments tell
// whether that version may have changed in between.
//
// The migration controller reads one before a migration rewrites anything
// and one after, and a migration across a change proves nothing. The
// trigger records one on the resource's StorageState with the etcd
// revision since which every object written is known to be in the current
// version, and that revision holds only while the fingerprint stays the
// same storage: a CRD whose storage version moved away and back has
// another generation, though its storage version hash is the one
// recorded, and objects written in between may be in the other version.
//
// A CRD's status.storedVersions are not part of it: they record what may
// be stored, not what is written. The trigger follows them on their own
// (a version they gain is one objects may be in).
//
// It is one rule, in one place, because both sides must agree on it.
package fingerprint

import (
	"slices"
	"strconv"
	"strings"

	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/svm-project/svm/internal/crdversions"
)

// Fingerprint is what decides a resource's storage version, as read at one
// moment.
type Fingerprint struct {
	// Value names the CRD by UID, generation and storage version, and the
	// StorageVersion object by resourceVersion. Empty when the resource
	// has neither (discovery alone).
	Value string
	// Disagreement, when not empty, says that API servers encode the
	// resource in different versions (a rolling upgrade under way).
	Disagreement string
}

// Of is the fingerprint of a resource with CRD crd and StorageVersion
// object sv, either nil when there is none.
func Of(crd *apiextensionsv1.CustomResourceDefinition, sv *apiserverinternalv1alpha1.StorageVersion) Fingerprint {
	var parts []string
	var fp Fingerprint
	if crd != nil {
		parts = append(parts, crdPrefix+crdPart{
			uid:        string(crd.UID),
			generation: strconv.FormatInt(crd.Generation, 10),
			storage:    crdversions.StorageVersion(crd),
		}.String())
	}
	if sv != nil {
		parts = append(parts, svPrefix+sv.ResourceVersion)
		fp.Disagreement = disagreement(sv)
	}
	fp.Value = strings.Join(parts, ",")
	return fp
}

// SameStorage reports whether nothing that decides the version objects are
// written in can have changed from fingerprint a, read first, to b: the
// same CRD at the same generation with the same storage version, and the
// same StorageVersion object. A CRD gone in b took every object of its
// resource with it: nothing can be left in an old version, so only the
// rest counts.
func SameStorage(a, b string) bool {
	if a == b {
		return true
	}
	pa, pb := split(a), split(b)
	return pa.sv == pb.sv && pa.crd != "" && pb.crd == ""
}

const (
	crdPrefix = "crd="
	svPrefix  = "storageversion="
)

// crdPart is what a fingerprint says of a CRD. A fingerprint svm wrote
// before the UID was part of it ("crd=<generation>/<storage>") is never
// the same storage as one written now: the migration starts over once,
// which costs writes, not safety.
type crdPart struct {
	uid, generation, storage string
}

func (c crdPart) String() string {
	return c.uid + "/" + c.generation + "/" + c.storage
}

// parts is a fingerprint read back: its CRD part and its StorageVersion
// object's resourceVersion, each "" when it has none.
type parts struct {
	crd, sv string
}

func split(v string) parts {
	var p parts
	for s := range strings.SplitSeq(v, ",") {
		switch {
		case strings.HasPrefix(s, crdPrefix):
			p.crd = strings.TrimPrefix(s, crdPrefix)
		case strings.HasPrefix(s, svPrefix):
			p.sv = strings.TrimPrefix(s, svPrefix)
		}
	}
	return p
}

// disagreement describes the API servers' disagreement on the encoding
// version in a StorageVersion object, "" when they agree (or none has
// reported).
func disagreement(sv *apiserverinternalv1alpha1.StorageVersion) string {
	if sv.Status.CommonEncodingVersion != nil || len(sv.Status.StorageVersions) == 0 {
		return ""
	}
	var each []string
	for _, s := range sv.Status.StorageVersions {
		each = append(each, s.EncodingVersion+" ("+s.APIServerID+")")
	}
	slices.Sort(each)
	return "API servers encode " + sv.Name + " in different versions: " + strings.Join(each, ", ")
}
