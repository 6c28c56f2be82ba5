package maybestored

import (
	"strings"
	"testing"
	"time"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/resources"
)

var (
	created = time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	hashV1  = resources.StorageVersionHash("example.com", "v1", "Widget")
	hashV2  = resources.StorageVersionHash("example.com", "v2", "Widget")
)

func widgets(stored ...string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com", UID: "crd-uid-2", Generation: 3, CreationTimestamp: metav1.NewTime(created)},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Widget", Plural: "widgets"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true}, {Name: "v2", Served: true, Storage: true},
			},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: stored},
	}
}

func state(fingerprint, current string, persisted ...string) *migrationv1alpha1.StorageState {
	return &migrationv1alpha1.StorageState{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Status: migrationv1alpha1.StorageStateStatus{
			StorageFingerprint: fingerprint, CurrentStorageVersionHash: current, PersistedStorageVersionHashes: persisted,
		},
	}
}

func inTree(name string, at time.Time, cond storagemigrationv1.MigrationConditionType) storagemigrationv1.StorageVersionMigration {
	return storagemigrationv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(at)},
		Status: storagemigrationv1.StorageVersionMigrationStatus{Conditions: []metav1.Condition{
			{Type: string(cond), Status: metav1.ConditionTrue},
		}},
	}
}

func TestOfCustomResource(t *testing.T) {
	const thisCRD = "crd=crd-uid-2/3/v2"
	after := created.Add(time.Minute)
	for _, tc := range []struct {
		name     string
		e        Evidence
		may      bool
		becauses []string // each must appear in the answer
	}{
		{
			name: "storedVersions list the version",
			e:    Evidence{CRD: widgets("v1", "v2")},
			may:  true, becauses: []string{"status.storedVersions [v1 v2] lists v1"},
		},
		{
			name: "storedVersions list the version even when the state vouches",
			e:    Evidence{CRD: widgets("v1", "v2"), State: state(thisCRD, hashV2, hashV2)},
			may:  true, becauses: []string{"lists v1"},
		},
		{
			name: "nothing but storedVersions, which do not list it",
			e:    Evidence{CRD: widgets("v2")},
			may:  false, becauses: []string{"nothing else says it may be stored"},
		},
		{
			name: "a failed in-tree migration after kube-controller-manager's early prune",
			e:    Evidence{CRD: widgets("v2"), InTree: []storagemigrationv1.StorageVersionMigration{inTree("user", after, storagemigrationv1.MigrationFailed)}},
			may:  true, becauses: []string{"in-tree migration user failed"},
		},
		{
			name: "a failed in-tree migration that a later one made good",
			e: Evidence{CRD: widgets("v2"), InTree: []storagemigrationv1.StorageVersionMigration{
				inTree("user", after, storagemigrationv1.MigrationFailed),
				inTree("again", after.Add(time.Minute), storagemigrationv1.MigrationSucceeded),
			}},
			may: false,
		},
		{
			name: "a success in the same second does not make a failure good",
			e: Evidence{CRD: widgets("v2"), InTree: []storagemigrationv1.StorageVersionMigration{
				inTree("user", after, storagemigrationv1.MigrationFailed),
				inTree("again", after, storagemigrationv1.MigrationSucceeded),
			}},
			may: true, becauses: []string{"in-tree migration user failed"},
		},
		{
			name: "a failure older than the CRD is of an earlier one",
			e:    Evidence{CRD: widgets("v2"), InTree: []storagemigrationv1.StorageVersionMigration{inTree("old", created.Add(-time.Hour), storagemigrationv1.MigrationFailed)}},
			may:  false,
		},
		{
			name: "objects older than the CRD: re-created over orphans",
			e:    Evidence{CRD: widgets("v2"), CreatedBeforeCRD: 7},
			may:  true, becauses: []string{"7 objects were created before customresourcedefinition widgets.example.com was (2026-12-06T09:00:00Z)"},
		},
		{
			name: "the state of this CRD vouches over a failed in-tree migration and orphans",
			e: Evidence{CRD: widgets("v2"), State: state(thisCRD, hashV2, hashV2), CreatedBeforeCRD: 7,
				InTree: []storagemigrationv1.StorageVersionMigration{inTree("user", after, storagemigrationv1.MigrationFailed)}},
			may: false, becauses: []string{"records every object rewritten in v2 since"},
		},
		{
			name: "a state that has not seen the CRD's last generations does not vouch: the storage may have flipped and back",
			e: Evidence{CRD: widgets("v2"), State: state("crd=crd-uid-2/1..2/v2", hashV2, hashV2),
				InTree: []storagemigrationv1.StorageVersionMigration{inTree("user", after, storagemigrationv1.MigrationFailed)}},
			may: true, becauses: []string{"in-tree migration user failed"},
		},
		{
			name: "a state that last saw a generation two before the CRD's, and nothing else (a failed in-tree migration deleted): the storage may have flipped and back",
			e:    Evidence{CRD: widgets("v2"), State: state("crd=crd-uid-2/1/v2", hashV2, hashV2)},
			may:  true, becauses: []string{"StorageState widgets.example.com last saw generation 1 of customresourcedefinition widgets.example.com, which is now at 3"},
		},
		{
			name: "a state that last saw the generation before the CRD's, with the storage version of now: nothing hides between them",
			e:    Evidence{CRD: widgets("v2"), State: state("crd=crd-uid-2/1..2/v2", hashV2, hashV2)},
			may:  false, becauses: []string{"nothing else says it may be stored"},
		},
		{
			name: "a state whose run of generations holds the CRD's vouches",
			e:    Evidence{CRD: widgets("v2"), State: state("crd=crd-uid-2/1..3/v2", hashV2, hashV2), CreatedBeforeCRD: 2},
			may:  false, becauses: []string{"records every object rewritten in v2 since"},
		},
		{
			name: "an in-tree migration under way: storedVersions cut when it started",
			e:    Evidence{CRD: widgets("v2"), InTree: []storagemigrationv1.StorageVersionMigration{inTree("user", after, storagemigrationv1.MigrationRunning)}},
			may:  true, becauses: []string{"in-tree migration user has not ended"},
		},
		{
			name: "a state of an earlier CRD of the name does not vouch",
			e:    Evidence{CRD: widgets("v2"), State: state("crd=crd-uid-1/3/v2", hashV2, hashV2), CreatedBeforeCRD: 7},
			may:  true, becauses: []string{"7 objects were created before"},
		},
		{
			name: "a state that lists the version",
			e:    Evidence{CRD: widgets("v2"), State: state(thisCRD, hashV2, hashV1, hashV2)},
			may:  true, becauses: []string{"lists its hash " + hashV1},
		},
		{
			name: "a state that knows nothing",
			e:    Evidence{CRD: widgets("v2"), State: state(thisCRD, hashV2, migrationv1alpha1.UnknownStorageVersionHash)},
			may:  true, becauses: []string{"does not know what is stored"},
		},
		{
			name: "a state whose current hash is not the CRD's storage version's does not vouch",
			e:    Evidence{CRD: widgets("v2"), State: state(thisCRD, hashV1, hashV1), CreatedBeforeCRD: 1},
			may:  true, becauses: []string{"1 objects were created before", "lists its hash " + hashV1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.e.Group, tc.e.Version, tc.e.Kind = "example.com", "v1", "Widget"
			got := Of(tc.e)
			if got.MayBeStored != tc.may {
				t.Errorf("MayBeStored = %v, want %v (%s)", got.MayBeStored, tc.may, got)
			}
			if len(got.Because) == 0 {
				t.Error("no reason given")
			}
			for _, want := range tc.becauses {
				if !strings.Contains(got.String(), want) {
					t.Errorf("reasons %q, want one containing %q", got, want)
				}
			}
		})
	}
}

func TestOfBuiltIn(t *testing.T) {
	hash := resources.StorageVersionHash("autoscaling", "v1", "HorizontalPodAutoscaler")
	other := resources.StorageVersionHash("autoscaling", "v2", "HorizontalPodAutoscaler")
	for _, tc := range []struct {
		name  string
		state *migrationv1alpha1.StorageState
		may   bool
	}{
		{"no StorageState", nil, true},
		{"a status never written", state("", ""), true},
		{"Unknown", state("", other, migrationv1alpha1.UnknownStorageVersionHash, other), true},
		{"its hash listed", state("", other, hash, other), true},
		{"only another hash", state("", other, other), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Of(Evidence{Group: "autoscaling", Version: "v1", Kind: "HorizontalPodAutoscaler", State: tc.state})
			if got.MayBeStored != tc.may || len(got.Because) != 1 {
				t.Errorf("Of = %+v, want MayBeStored %v with one reason", got, tc.may)
			}
		})
	}
}

// TestUnrecorded: what svm check-upgrade, reading no object, hears of a
// CRD: the reasons storedVersions miss, never the orphans it cannot count.
func TestUnrecorded(t *testing.T) {
	after := created.Add(time.Minute)
	for _, tc := range []struct {
		name string
		e    Evidence
		want string // "" when nothing is unrecorded
	}{
		{name: "nothing", e: Evidence{CRD: widgets("v2")}},
		{name: "a built-in resource", e: Evidence{State: state("", hashV2, hashV2)}},
		{
			name: "a failed in-tree migration",
			e:    Evidence{CRD: widgets("v2"), InTree: []storagemigrationv1.StorageVersionMigration{inTree("user", after, storagemigrationv1.MigrationFailed)}},
			want: "in-tree migration user failed",
		},
		{
			name: "a state that has not seen generation 2",
			e:    Evidence{CRD: widgets("v2"), State: state("crd=crd-uid-2/1/v2", hashV2, hashV2)},
			want: "last saw generation 1",
		},
		{
			name: "a state that vouches",
			e: Evidence{CRD: widgets("v2"), State: state("crd=crd-uid-2/3/v2", hashV2, hashV2),
				InTree: []storagemigrationv1.StorageVersionMigration{inTree("user", after, storagemigrationv1.MigrationFailed)}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.e.Group, tc.e.Version, tc.e.Kind = "example.com", "v1", "Widget"
			got := Unrecorded(tc.e)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("Unrecorded = %q, want %q", got, tc.want)
			}
		})
	}
}
