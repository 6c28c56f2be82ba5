package crdversions

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecidePrune(t *testing.T) {
	start := Storage{UID: "uid-1", Generation: 3, StorageVersion: "v2", StoredVersions: []string{"v1", "v2"}}
	with := func(change func(*Storage)) *Storage {
		s := start
		change(&s)
		return &s
	}
	tests := []struct {
		name        string
		now         *Storage
		failed      int64
		left        int64
		wantVerdict PruneVerdict
		wantWhy     string
	}{
		{
			name:        "unchanged and every object migrated: prune",
			now:         with(func(*Storage) {}),
			wantVerdict: Prune,
		},
		{
			name:        "storedVersions gained an entry without a new generation: objects may be stored in it",
			now:         with(func(s *Storage) { s.StoredVersions = []string{"v0", "v1", "v2"} }),
			wantVerdict: PruneCRDChanged,
			wantWhy:     "status.storedVersions gained v0 during the migration",
		},
		{
			name:        "an object failed",
			now:         with(func(*Storage) {}),
			failed:      2,
			wantVerdict: PruneObjectsFailed,
			wantWhy:     "2 objects could not be rewritten",
		},
		{
			name:        "managedFields entries still name v1: held",
			now:         with(func(*Storage) {}),
			left:        20,
			wantVerdict: PruneEntriesLeft,
			wantWhy:     "20 managedFields entries still name v1: server-side apply on their objects would fail once it is removed",
		},
		{
			name:        "failed objects are said before entries left",
			now:         with(func(*Storage) {}),
			failed:      1,
			left:        3,
			wantVerdict: PruneObjectsFailed,
			wantWhy:     "1 objects could not be rewritten",
		},
		{
			name:        "storage version flipped back",
			now:         with(func(s *Storage) { s.Generation, s.StorageVersion = 4, "v1" }),
			wantVerdict: PruneCRDChanged,
			wantWhy:     "the storage version changed from v2 to v1",
		},
		{
			name:        "storage version flipped and back again",
			now:         with(func(s *Storage) { s.Generation = 5 }),
			wantVerdict: PruneCRDChanged,
			wantWhy:     "the CRD changed (generation 3, now 5)",
		},
		{
			name:        "a changed CRD wins over failed objects",
			now:         with(func(s *Storage) { s.Generation = 4 }),
			failed:      1,
			wantVerdict: PruneCRDChanged,
			wantWhy:     "the CRD changed (generation 3, now 4)",
		},
		{
			name:        "deleted and created again under the same name",
			now:         with(func(s *Storage) { s.UID, s.Generation = "uid-2", 1 }),
			wantVerdict: PruneCRDChanged,
			wantWhy:     "the CRD was deleted and created again",
		},
		{
			name:        "deleted",
			now:         nil,
			wantVerdict: PruneCRDGone,
			wantWhy:     "the CRD was deleted",
		},
		{
			name:        "pruned by someone else meanwhile",
			now:         with(func(s *Storage) { s.StoredVersions = []string{"v2"} }),
			wantVerdict: PruneNothingLeft,
			wantWhy:     "status.storedVersions lists only the storage version already",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verdict, why := DecidePrune(start, tt.now, tt.failed, tt.left)
			if verdict != tt.wantVerdict || why != tt.wantWhy {
				t.Errorf("DecidePrune = (%d, %q), want (%d, %q)", verdict, why, tt.wantVerdict, tt.wantWhy)
			}
		})
	}
}

func TestOnlyStorage(t *testing.T) {
	tests := []struct {
		storage string
		stored  []string
		want    bool
	}{
		{"v2", []string{"v2"}, true},
		{"v2", []string{"v1", "v2"}, false},
		{"v2", []string{"v1"}, false},
		{"v2", nil, false},
	}
	for _, tt := range tests {
		if got := (Storage{StorageVersion: tt.storage, StoredVersions: tt.stored}).OnlyStorage(); got != tt.want {
			t.Errorf("OnlyStorage(storage %s, stored %v) = %v, want %v", tt.storage, tt.stored, got, tt.want)
		}
	}
}

func TestOf(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{UID: "u", Generation: 7},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
			{Name: "v1", Served: true}, {Name: "v2", Served: true, Storage: true}, {Name: "v3"},
		}},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: []string{"v1", "v2"}},
	}
	want := Storage{UID: "u", Generation: 7, StorageVersion: "v2", StoredVersions: []string{"v1", "v2"}}
	if diff := cmp.Diff(want, Of(crd)); diff != "" {
		t.Errorf("Of (-want +got):\n%s", diff)
	}
}

func TestKeptWithNoneRetired(t *testing.T) {
	v := func(name string, served, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: served, Storage: storage}
	}
	tests := []struct {
		name     string
		versions []apiextensionsv1.CustomResourceDefinitionVersion
		want     string
		wantOK   bool
	}{
		{"the storage version when served", []apiextensionsv1.CustomResourceDefinitionVersion{v("v1", true, false), v("v2", true, true)}, "v2", true},
		{"the first served when storage is not", []apiextensionsv1.CustomResourceDefinitionVersion{v("v1", false, true), v("v2", true, false), v("v3", true, false)}, "v2", true},
		{"none served", []apiextensionsv1.CustomResourceDefinitionVersion{v("v1", false, true)}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			crd := &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{Versions: tt.versions}}
			got, ok := Kept(crd, "")
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Kept(crd, \"\") = (%q, %v), want (%q, %v)", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestKept(t *testing.T) {
	v := func(name string, served, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: served, Storage: storage}
	}
	tests := []struct {
		name     string
		versions []apiextensionsv1.CustomResourceDefinitionVersion
		retired  string
		want     string
		wantOK   bool
	}{
		{"the storage version", []apiextensionsv1.CustomResourceDefinitionVersion{v("v1", true, false), v("v2", true, true)}, "v1", "v2", true},
		{"the first other served one when storage is not served", []apiextensionsv1.CustomResourceDefinitionVersion{v("v1", true, false), v("v2", false, true), v("v3", true, false)}, "v1", "v3", true},
		{"never the retired one", []apiextensionsv1.CustomResourceDefinitionVersion{v("v1", true, false), v("v2", false, true)}, "v1", "", false},
		{"a version already removed", []apiextensionsv1.CustomResourceDefinitionVersion{v("v2", true, true)}, "v1", "v2", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			crd := &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{Versions: tt.versions}}
			got, ok := Kept(crd, tt.retired)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Kept = (%q, %v), want (%q, %v)", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestBesides(t *testing.T) {
	tests := []struct {
		storage string
		stored  []string
		want    []string
	}{
		{"v2", []string{"v1", "v2"}, []string{"v1"}},
		{"v2", []string{"v2"}, nil},
		{"v3", []string{"v1", "v2"}, []string{"v1", "v2"}},
	}
	for _, tt := range tests {
		got := Storage{StorageVersion: tt.storage, StoredVersions: tt.stored}.Besides()
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Besides(storage %s, stored %v) (-want +got):\n%s", tt.storage, tt.stored, diff)
		}
	}
}

func TestMoveOff(t *testing.T) {
	v := func(name string, served, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: served, Storage: storage}
	}
	tests := []struct {
		name     string
		versions []apiextensionsv1.CustomResourceDefinitionVersion
		stored   []string
		retired  string
		wantKept string
		wantOff  []string
		wantOK   bool
	}{
		{"a prune moves every version it removes to the storage version",
			[]apiextensionsv1.CustomResourceDefinitionVersion{v("v1", true, false), v("v2", true, false), v("v3", true, true)},
			[]string{"v1", "v2", "v3"}, "", "v3", []string{"v1", "v2"}, true},
		// The storage version is not served: entries move to the version
		// objects are written through, and those naming the storage
		// version stay (a prune keeps it).
		{"a prune with the storage version unserved moves to the first served",
			[]apiextensionsv1.CustomResourceDefinitionVersion{v("v1", true, false), v("v2", false, true), v("v3", true, false)},
			[]string{"v1", "v2"}, "", "v1", nil, false},
		{"a prune with the storage version unserved, a third stored",
			[]apiextensionsv1.CustomResourceDefinitionVersion{v("v1", true, false), v("v2", false, true), v("v3", true, false)},
			[]string{"v1", "v2", "v3"}, "", "v1", []string{"v3"}, true},
		{"nothing to prune",
			[]apiextensionsv1.CustomResourceDefinitionVersion{v("v1", true, false), v("v2", true, true)},
			[]string{"v2"}, "", "v2", nil, false},
		{"a retirement moves the retired version alone",
			[]apiextensionsv1.CustomResourceDefinitionVersion{v("v1", true, false), v("v2", true, false), v("v3", true, true)},
			[]string{"v3"}, "v1", "v3", []string{"v1"}, true},
		{"no version to move to",
			[]apiextensionsv1.CustomResourceDefinitionVersion{v("v1", true, false), v("v2", false, true)},
			[]string{"v1", "v2"}, "v1", "", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			crd := &apiextensionsv1.CustomResourceDefinition{
				Spec:   apiextensionsv1.CustomResourceDefinitionSpec{Versions: tt.versions},
				Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: tt.stored},
			}
			kept, off, ok := MoveOff(crd, tt.retired)
			if ok != tt.wantOK || (ok && (kept != tt.wantKept || !cmp.Equal(off, tt.wantOff))) {
				t.Errorf("MoveOff = (%q, %v, %v), want (%q, %v, %v)", kept, off, ok, tt.wantKept, tt.wantOff, tt.wantOK)
			}
		})
	}
}

func TestPrunedCarriesTheResourceVersionRead(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com", ResourceVersion: "42"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
			{Name: "v1", Served: true}, {Name: "v2", Served: true, Storage: true},
		}},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: []string{"v1", "v2"}},
	}
	got := Pruned(crd)
	if diff := cmp.Diff([]string{"v2"}, got.Status.StoredVersions); diff != "" {
		t.Errorf("Pruned storedVersions (-want +got):\n%s", diff)
	}
	if got.ResourceVersion != "42" {
		t.Errorf("Pruned resourceVersion = %q, want the one read, 42", got.ResourceVersion)
	}
	if diff := cmp.Diff([]string{"v1", "v2"}, crd.Status.StoredVersions); diff != "" {
		t.Errorf("Pruned changed the CRD it was given (-want +got):\n%s", diff)
	}
}

func TestServes(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
		{Name: "v1", Served: false}, {Name: "v2", Served: true, Storage: true},
	}}}
	for version, want := range map[string]bool{"v1": false, "v2": true, "v3": false} {
		if got := Serves(crd, version); got != want {
			t.Errorf("Serves(%s) = %v, want %v", version, got, want)
		}
	}
}
