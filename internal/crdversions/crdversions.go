// Package crdversions is what a CustomResourceDefinition says about the
// versions of its objects, read one way everywhere: the version they are
// stored in, the versions they may still be stored in, the version they
// are written through and their managedFields name when another is
// retired, when status.storedVersions may be pruned, and what they are
// pruned to.
//
// The trigger, the migration controller, svm migrate, svm retire and
// pkg/migrate all ask these questions of the same CRD. Answered by each
// on its own they drifted apart (one moved managedFields only when the
// storage version was served, another to the first served version), so
// each answer is here once, as a pure function of the CRD read.
package crdversions

import (
	"fmt"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"
)

// StorageVersion is the version crd stores its objects in, "" if it names
// none (the API server refuses such a CRD).
func StorageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

// Serves reports whether crd serves version.
func Serves(crd *apiextensionsv1.CustomResourceDefinition, version string) bool {
	return slices.ContainsFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
		return v.Name == version && v.Served
	})
}

// Storage is what a CRD says about storage at one read: what pruning
// storedVersions is decided on.
type Storage struct {
	UID            types.UID
	Generation     int64
	StorageVersion string
	StoredVersions []string
}

// Of reads crd's Storage.
func Of(crd *apiextensionsv1.CustomResourceDefinition) Storage {
	return Storage{UID: crd.UID, Generation: crd.Generation, StorageVersion: StorageVersion(crd), StoredVersions: crd.Status.StoredVersions}
}

// OnlyStorage reports whether storedVersions list the storage version
// alone: no object can be stored in another.
func (s Storage) OnlyStorage() bool {
	return len(s.StoredVersions) == 1 && s.StoredVersions[0] == s.StorageVersion
}

// Besides are the versions storedVersions list besides the storage
// version: those objects may still be stored in, and a prune removes.
func (s Storage) Besides() []string {
	var out []string
	for _, v := range s.StoredVersions {
		if v != s.StorageVersion {
			out = append(out, v)
		}
	}
	return out
}

// Kept is the version crd's objects are written through, and their
// managedFields entries name, once retired is no longer used: the storage
// version if it is served, else the first other served one. Any served
// version will do for a write, since the API server stores whatever it is
// written through in the storage version. retired "" excludes none. ok is
// false when no version is left.
func Kept(crd *apiextensionsv1.CustomResourceDefinition, retired string) (version string, ok bool) {
	first := ""
	for _, v := range crd.Spec.Versions {
		if !v.Served || v.Name == retired {
			continue
		}
		if v.Storage {
			return v.Name, true
		}
		if first == "" {
			first = v.Name
		}
	}
	return first, first != ""
}

// MoveOff is which versions' managedFields entries a rewrite of crd's
// objects moves, and to which version: with retired "", every version a
// prune of storedVersions removes (Besides), to Kept; else retired alone.
// Entries left naming a version that is then removed from the CRD make
// every server-side apply on their objects fail. ok is false when there
// is nothing to move or no version to move to.
func MoveOff(crd *apiextensionsv1.CustomResourceDefinition, retired string) (kept string, off []string, ok bool) {
	if kept, ok = Kept(crd, retired); !ok {
		return "", nil, false
	}
	if retired != "" {
		return kept, []string{retired}, true
	}
	off = slices.DeleteFunc(Of(crd).Besides(), func(v string) bool { return v == kept })
	return kept, off, len(off) > 0
}

// Pruned is crd with status.storedVersions cut to its storage version,
// carrying the resourceVersion crd was read at: written with an update of
// the status, it is refused if the CRD changed since, and the prune is
// then decided again on what it is now.
func Pruned(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	out := crd.DeepCopy()
	out.Status.StoredVersions = []string{StorageVersion(crd)}
	return out
}

// PruneVerdict is what to do with a CRD's storedVersions after its
// resource was migrated.
type PruneVerdict int

const (
	// Prune: cut storedVersions to the storage version.
	Prune PruneVerdict = iota
	// PruneNothingLeft: storedVersions list the storage version alone.
	PruneNothingLeft
	// PruneObjectsFailed: some objects may still be in an old version.
	PruneObjectsFailed
	// PruneCRDGone: the CRD was deleted, and its objects with it.
	PruneCRDGone
	// PruneCRDChanged: the storage version may have changed during the
	// migration.
	PruneCRDChanged
	// PruneEntriesLeft: nothing is stored in the versions a prune
	// removes, but managedFields entries still name them. The prune is
	// what lets a version be removed from the CRD, after which every
	// server-side apply on those objects fails: storedVersions keep them
	// until the entries move.
	PruneEntriesLeft
)

// DecidePrune decides from the CRD as read before the migration (start)
// and as read now (nil when it is gone), the number of objects the
// migration could not rewrite and the number of managedFields entries it
// left naming a version to be pruned, whether storedVersions may be
// pruned; why says why not. A migration that ran across a change of the
// CRD's spec proves nothing about its storage version now, even one
// flipped away and back (the generation tells).
func DecidePrune(start Storage, now *Storage, failed, entriesLeft int64) (verdict PruneVerdict, why string) {
	switch {
	case now == nil:
		return PruneCRDGone, "the CRD was deleted"
	case now.UID != start.UID:
		return PruneCRDChanged, "the CRD was deleted and created again"
	case now.StorageVersion != start.StorageVersion:
		return PruneCRDChanged, fmt.Sprintf("the storage version changed from %s to %s", start.StorageVersion, now.StorageVersion)
	case now.Generation != start.Generation:
		return PruneCRDChanged, fmt.Sprintf("the CRD changed (generation %d, now %d)", start.Generation, now.Generation)
	case len(gained(start.StoredVersions, now.StoredVersions)) > 0:
		// A status write gained it, which moves no generation: whoever
		// wrote it says objects may be stored in it, which a migration
		// listed before cannot have seen.
		return PruneCRDChanged, fmt.Sprintf("status.storedVersions gained %s during the migration", strings.Join(gained(start.StoredVersions, now.StoredVersions), ", "))
	case failed > 0:
		return PruneObjectsFailed, fmt.Sprintf("%d objects could not be rewritten", failed)
	case now.OnlyStorage():
		return PruneNothingLeft, "status.storedVersions lists only the storage version already"
	case entriesLeft > 0:
		return PruneEntriesLeft, fmt.Sprintf("%d managedFields entries still name %s: server-side apply on their objects would fail once it is removed", entriesLeft, strings.Join(now.Besides(), ", "))
	}
	return Prune, ""
}

// gained is the versions now lists that before does not.
func gained(before, now []string) []string {
	var out []string
	for _, v := range now {
		if !slices.Contains(before, v) {
			out = append(out, v)
		}
	}
	return out
}
