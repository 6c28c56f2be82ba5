// Package fingerprint says, in one string, what decides the version a
// resource's objects are written in: for a custom resource its CRD (which
// CRD, with which storage version, over which generations), and the
// resource's StorageVersion object where the API servers keep one. Two
// fingerprints read at two moments tell whether that version may have
// changed in between.
//
// The migration controller reads one before a migration rewrites anything
// and one after, and a migration across a change proves nothing. The
// trigger records one on the resource's StorageState with the etcd
// revision since which every object written is known to be in the current
// version, and that revision holds only while the fingerprint stays the
// same storage.
//
// A CRD's spec changes for many reasons that leave its storage version
// alone (a conversion webhook's caBundle rotated, a schema or a printer
// column edited), and each moves its generation. Such a change is no
// storage change, but a generation svm never saw may hide one: between
// generation 5 and 8, both storing v2, the storage may have gone to v1
// and back, and objects written meanwhile be stored in v1. So a
// fingerprint names, besides the CRD's UID and storage version, the
// generations svm has seen one after another with that storage version:
// from the first of them, its storage epoch, to the one read
// ("crd=<uid>/<epoch>..<generation>/<storage>", or
// "crd=<uid>/<generation>/<storage>" when they are one). Every generation
// in that range had that storage version: the API server moves the
// generation by one on every spec change, never by more, so a generation
// names one spec, and two generations one apart have no other between
// them. Two fingerprints are the same storage when their ranges, joined,
// leave no generation out: then every generation between the two reads
// had the storage version of both. A generation svm did not see between
// two it did (a gap of two or more) starts a new epoch; a change of one
// generation cannot hide a flip and a flip back.
//
// Epochs keeps, in the process, each CRD's epoch as svm reads it; every
// read of a CRD that makes a fingerprint goes through it (the trigger's
// rounds, the guard's reads), and what svm recorded (a StorageState's
// fingerprint, a migration's) is taught back to it after a restart, so
// that an epoch outlives the process that saw it begin.
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
)

// Fingerprint is what decides a resource's storage version, as read at one
// moment.
type Fingerprint struct {
	// Value names the CRD by UID, storage version and the generations
	// seen with it, and the StorageVersion object by resourceVersion.
	// Empty when the resource has neither (discovery alone).
	Value string
	// Disagreement, when not empty, says that API servers encode the
	// resource in different versions (a rolling upgrade under way).
	Disagreement string
}

// SameStorage reports whether nothing that decides the version objects are
// written in can have changed from fingerprint a, read first, to b: the
// same CRD with the same storage version at every generation from a's to
// b's (their ranges of generations, joined, leave none out), and the same
// StorageVersion object. A CRD gone in b took every object of its
// resource with it: nothing can be left in an old version, so only the
// rest counts.
func SameStorage(a, b string) bool {
	if a == b {
		return true
	}
	pa, pb := split(a), split(b)
	switch {
	case pa.sv != pb.sv:
		return false
	case pa.crd != "" && pb.crd == "":
		return true
	}
	ca, okA := parseCRD(pa.crd)
	cb, okB := parseCRD(pb.crd)
	return okA && okB && ca.joins(cb)
}

// Covers reports whether the CRD fingerprint fp names had the storage
// version it names at generation too: generation lies in its range.
func Covers(fp string, generation int64) bool {
	c, ok := parseCRD(split(fp).crd)
	return ok && c.epoch <= generation && generation <= c.generation
}

const (
	crdPrefix = "crd="
	svPrefix  = "storageversion="
)

// crdPart is what a fingerprint says of a CRD: every generation from
// epoch to generation had storage version storage. A fingerprint svm
// wrote before the UID was part of it ("crd=<generation>/<storage>") does
// not parse: it is never the same storage as another, and the migration
// starts over once, which costs writes, not safety. One svm wrote before
// epochs ("crd=<uid>/<generation>/<storage>") parses as a range of one
// generation: it says no more than the read it was.
type crdPart struct {
	uid, storage      string
	epoch, generation int64
}

func (c crdPart) String() string {
	gens := strconv.FormatInt(c.generation, 10)
	if c.epoch != c.generation {
		gens = strconv.FormatInt(c.epoch, 10) + ".." + gens
	}
	return c.uid + "/" + gens + "/" + c.storage
}

// joins reports whether c and d, joined, are one run of generations with
// one storage version: the same CRD and storage version, and no
// generation between their ranges left out.
func (c crdPart) joins(d crdPart) bool {
	return c.uid == d.uid && c.storage == d.storage && c.epoch <= d.generation+1 && d.epoch <= c.generation+1
}

// parseCRD reads a fingerprint's CRD part back; ok is false when it has
// none, or one svm cannot read.
func parseCRD(s string) (c crdPart, ok bool) {
	f := strings.Split(s, "/")
	if len(f) != 3 || f[0] == "" {
		return crdPart{}, false
	}
	from, to, ranged := strings.Cut(f[1], "..")
	if !ranged {
		to = from
	}
	epoch, err1 := strconv.ParseInt(from, 10, 64)
	generation, err2 := strconv.ParseInt(to, 10, 64)
	if err1 != nil || err2 != nil || epoch > generation {
		return crdPart{}, false
	}
	return crdPart{uid: f[0], storage: f[2], epoch: epoch, generation: generation}, true
}

// CRDUID is the UID of the CRD fingerprint v names; ok is false when it
// names none svm can read.
func CRDUID(v string) (uid string, ok bool) {
	c, ok := parseCRD(split(v).crd)
	return c.uid, ok
}

// Recreated reports whether fingerprint b names another CRD than a did:
// one created since under the same name (a and b both name a CRD, by
// other UIDs), or one where a named none but something else (a
// StorageVersion object, or a fingerprint svm wrote before the UID was
// part of it). Objects a CRD deleted without them (its finalizer
// removed) left behind may be stored in any version it stored, which
// nothing svm recorded for a can vouch for once svm was not watching.
func Recreated(a, b string) bool {
	pb, ok := parseCRD(split(b).crd)
	if !ok || a == "" {
		return false
	}
	pa, ok := parseCRD(split(a).crd)
	return !ok || pa.uid != pb.uid
}

// GenerationsUnseen reports whether a and b name the same CRD with a
// generation between them that svm did not see with their storage
// version (their ranges, joined, leave one out): the storage may have
// gone to any version the CRD had and come back, and objects written
// meanwhile be stored in it, whatever storedVersions say now (they can be
// cut, by kube-controller-manager's migrator or by hand).
func GenerationsUnseen(a, b string) bool {
	ca, okA := parseCRD(split(a).crd)
	cb, okB := parseCRD(split(b).crd)
	return okA && okB && ca.uid == cb.uid && !ca.joins(cb)
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

// value is the fingerprint of a CRD as c names it (nil when there is
// none) and StorageVersion object sv (nil when there is none).
func value(c *crdPart, sv *apiserverinternalv1alpha1.StorageVersion) Fingerprint {
	var out []string
	var fp Fingerprint
	if c != nil {
		out = append(out, crdPrefix+c.String())
	}
	if sv != nil {
		out = append(out, svPrefix+sv.ResourceVersion)
		fp.Disagreement = disagreement(sv)
	}
	fp.Value = strings.Join(out, ",")
	return fp
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
