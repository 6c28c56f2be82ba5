// Package maybestored answers one question the same way for every part of
// svm that lets a version go (svm retire, svm migrate of a CRD, pkg/migrate):
// may objects of a resource still be stored in a version?
//
// A CRD's status.storedVersions alone cannot answer it. kube-controller-manager
// 1.37 cuts them to the storage version when it starts a migration, before
// it has rewritten anything, and leaves them so when that migration fails;
// a CRD deleted without its objects (its finalizer removed) and created
// again starts with storedVersions naming its storage version alone, over
// objects stored in whatever version its predecessor stored. svm's
// StorageState, the in-tree migrations and the objects' own creation times
// tell what storedVersions do not. The answer is "may be stored" when any of
// them says so, and "not stored" only when none does: a wrong "may" costs a
// rewrite, a wrong "not" a version removed under objects that need it.
package maybestored

import (
	"fmt"
	"slices"
	"strings"
	"time"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/crdversions"
	"github.com/svm-project/svm/internal/fingerprint"
	"github.com/svm-project/svm/internal/resources"
)

// Evidence is what was read of a resource to tell whether its objects may
// be stored in Version.
type Evidence struct {
	// Group, Version and Kind name the version asked about.
	Group, Version, Kind string
	// CRD is the resource's CustomResourceDefinition; nil for a built-in
	// or aggregated resource.
	CRD *apiextensionsv1.CustomResourceDefinition
	// State is svm's StorageState of the resource, nil when there is none
	// (or svm's API is not served).
	State *migrationv1alpha1.StorageState
	// InTree are the in-tree migrations (storagemigration.k8s.io) of the
	// resource, in any order; none where that API is not served.
	InTree []storagemigrationv1.StorageVersionMigration
	// CreatedBeforeCRD counts the objects created before CRD was: left
	// from an earlier CRD of the same name. -1 when they were not counted.
	CreatedBeforeCRD int64
}

// Answer is whether objects may be stored in the version, and every reason
// found, the first one the strongest.
type Answer struct {
	MayBeStored bool
	Because     []string
}

// String is the reasons, in one line.
func (a Answer) String() string { return strings.Join(a.Because, "; ") }

// Of answers from e.
func Of(e Evidence) Answer {
	if e.CRD == nil {
		return builtIn(e)
	}
	return custom(e)
}

// builtIn answers for a resource no CRD defines, whose versions kube-apiserver
// keeps no record of: svm's StorageState alone tells, and without one
// anything may be stored.
func builtIn(e Evidence) Answer {
	hash := resources.StorageVersionHash(e.Group, e.Version, e.Kind)
	if e.State == nil {
		return Answer{MayBeStored: true, Because: []string{"no StorageState records what is stored"}}
	}
	name, hashes := e.State.Name, e.State.Status.PersistedStorageVersionHashes
	switch {
	case len(hashes) == 0 || slices.Contains(hashes, migrationv1alpha1.UnknownStorageVersionHash):
		return Answer{MayBeStored: true, Because: []string{fmt.Sprintf("StorageState %s does not know what is stored", name)}}
	case slices.Contains(hashes, hash):
		return Answer{MayBeStored: true, Because: []string{fmt.Sprintf("StorageState %s lists its hash %s", name, hash)}}
	}
	return Answer{Because: []string{fmt.Sprintf("StorageState %s lists only %v, not its hash %s", name, hashes, hash)}}
}

// custom answers for a custom resource: storedVersions listing the version
// settle it; else svm's StorageState, when it has followed this very CRD
// and records the storage version alone, vouches that every object was
// rewritten since anything else was stored; else each piece of evidence
// that storedVersions missed something says "may".
func custom(e Evidence) Answer {
	s := crdversions.Of(e.CRD)
	var a Answer
	if slices.Contains(s.StoredVersions, e.Version) {
		a.add(fmt.Sprintf("status.storedVersions %v lists %s", s.StoredVersions, e.Version))
	}
	if why, ok := vouches(e, s); ok {
		if !a.MayBeStored {
			a.Because = append(a.Because, fmt.Sprintf("status.storedVersions %v does not list %s, and %s", s.StoredVersions, e.Version, why))
		}
		return a
	}
	if why := stateSays(e); why != "" {
		a.add(why)
	}
	if why := stateBehind(e); why != "" {
		a.add(why)
	}
	if why := failedInTree(e); why != "" {
		a.add(why)
	}
	if e.CreatedBeforeCRD > 0 {
		a.add(fmt.Sprintf("%d objects were created before customresourcedefinition %s was (%s): they are left from an earlier one of that name and may be stored in any version it stored",
			e.CreatedBeforeCRD, e.CRD.Name, e.CRD.CreationTimestamp.UTC().Format(time.RFC3339)))
	}
	if !a.MayBeStored {
		a.Because = append(a.Because, fmt.Sprintf("status.storedVersions %v does not list %s, and nothing else says it may be stored", s.StoredVersions, e.Version))
	}
	return a
}

func (a *Answer) add(why string) {
	a.MayBeStored = true
	a.Because = append(a.Because, why)
}

// vouches says whether the StorageState answers for every object of this
// CRD: it follows this CRD as it is now (its fingerprint names the CRD's
// UID, and a run of generations with the storage version that holds the
// CRD's current one: a state left from an earlier CRD of the name, or one
// that has not seen the CRD's last changes, knows nothing of what happened
// in between), records the storage version's hash as current, and lists
// it alone as persisted, which the trigger writes only once a migration
// made since the storage last moved has rewritten every object. A failed
// in-tree migration before or after cannot have stored anything in
// another version: the storage version did not move, or the state would
// say so.
func vouches(e Evidence, s crdversions.Storage) (string, bool) {
	if e.State == nil {
		return "", false
	}
	fp := e.State.Status.StorageFingerprint
	if uid, ok := fingerprint.CRDUID(fp); !ok || uid != string(e.CRD.UID) || !fingerprint.Covers(fp, e.CRD.Generation) {
		return "", false
	}
	want := resources.StorageVersionHash(e.Group, s.StorageVersion, e.CRD.Spec.Names.Kind)
	st := e.State.Status
	if st.CurrentStorageVersionHash != want || !slices.Equal(st.PersistedStorageVersionHashes, []string{want}) {
		return "", false
	}
	return fmt.Sprintf("StorageState %s records every object rewritten in %s since", e.State.Name, s.StorageVersion), true
}

// Unrecorded is why a custom resource's objects may be stored in a version
// its storedVersions do not list, though no object is older than its CRD,
// "" when nothing says so: a failed in-tree migration that the
// StorageState does not vouch over. svm check-upgrade, which reads no
// object, asks it of every CRD.
func Unrecorded(e Evidence) string {
	if e.CRD == nil {
		return ""
	}
	if _, ok := vouches(e, crdversions.Of(e.CRD)); ok {
		return ""
	}
	if why := stateBehind(e); why != "" {
		return why
	}
	return failedInTree(e)
}

// stateBehind is why the StorageState cannot tell what generations of
// this CRD it did not see stored, "" when it saw them all or follows
// another CRD: it records a generation of this CRD, the CRD is now at a
// later one, and one in between was never read (svm controller was not
// running, or not leading). The storage version may have gone to another
// version and come back meanwhile, objects written then be stored in it,
// and storedVersions have been cut since (kube-controller-manager's
// migrator cuts them when it starts, and a failed in-tree migration
// that was deleted leaves no trace). svm controller, once it looks, says
// the same (every version possibly stored) and migrates.
func stateBehind(e Evidence) string {
	if e.State == nil {
		return ""
	}
	recorded := e.State.Status.StorageFingerprint
	now := (*fingerprint.Epochs)(nil).Of(e.CRD, nil).Value
	if !fingerprint.GenerationsUnseen(recorded, now) {
		return ""
	}
	seen, _ := fingerprint.CRDGeneration(recorded)
	return fmt.Sprintf("StorageState %s last saw generation %d of customresourcedefinition %s, which is now at %d: its storage version may have moved and come back in between, unseen",
		e.State.Name, seen, e.CRD.Name, e.CRD.Generation)
}

// stateSays is why the StorageState says objects may be stored in the
// version, "" when it does not.
func stateSays(e Evidence) string {
	if e.State == nil {
		return ""
	}
	hashes := e.State.Status.PersistedStorageVersionHashes
	hash := resources.StorageVersionHash(e.Group, e.Version, e.Kind)
	switch {
	case slices.Contains(hashes, migrationv1alpha1.UnknownStorageVersionHash):
		return fmt.Sprintf("StorageState %s does not know what is stored", e.State.Name)
	case slices.Contains(hashes, hash):
		return fmt.Sprintf("StorageState %s lists its hash %s", e.State.Name, hash)
	}
	return ""
}

// failedInTree is why the in-tree migrations say objects may be stored in
// the version, "" when they do not: one of this CRD's resource failed or
// has not ended (kube-controller-manager cuts storedVersions when it
// starts one, before it has rewritten anything), and
// none was created after it that succeeded (one made in the same second
// does not count: creation times are in seconds). A failed one leaves
// storedVersions saying nothing is stored in a version objects were never
// moved out of.
func failedInTree(e Evidence) string {
	var lastSucceeded time.Time
	for i := range e.InTree {
		if m := &e.InTree[i]; ended(m, storagemigrationv1.MigrationSucceeded) && m.CreationTimestamp.After(lastSucceeded) {
			lastSucceeded = m.CreationTimestamp.Time
		}
	}
	for i := range e.InTree {
		m := &e.InTree[i]
		if ended(m, storagemigrationv1.MigrationSucceeded) || m.CreationTimestamp.Before(&e.CRD.CreationTimestamp) || m.CreationTimestamp.Time.Before(lastSucceeded) {
			continue
		}
		what := "has not ended"
		if ended(m, storagemigrationv1.MigrationFailed) {
			what = "failed"
		}
		return fmt.Sprintf("in-tree migration %s %s and none succeeded after it: kube-controller-manager cuts storedVersions when a migration starts, so they may miss what it did not rewrite", m.Name, what)
	}
	return ""
}

// ended reports whether the in-tree migration m has condition c true. Read
// here rather than through internal/intree, which would bring
// controller-runtime into pkg/migrate's imports.
func ended(m *storagemigrationv1.StorageVersionMigration, c storagemigrationv1.MigrationConditionType) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, string(c))
}
