package migrate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDecidePrune(t *testing.T) {
	start := crdStorage{UID: "uid-1", Generation: 3, StorageVersion: "v2", StoredVersions: []string{"v1", "v2"}}
	with := func(change func(*crdStorage)) *crdStorage {
		s := start
		change(&s)
		return &s
	}
	tests := []struct {
		name        string
		now         *crdStorage
		failed      int64
		wantVerdict pruneVerdict
		wantWhy     string
	}{
		{
			name:        "unchanged and every object migrated: prune",
			now:         with(func(*crdStorage) {}),
			wantVerdict: prunePrune,
		},
		{
			name:        "status changed but not the generation: prune",
			now:         with(func(s *crdStorage) { s.StoredVersions = []string{"v0", "v1", "v2"} }),
			wantVerdict: prunePrune,
		},
		{
			name:        "an object failed",
			now:         with(func(*crdStorage) {}),
			failed:      2,
			wantVerdict: pruneObjectsFailed,
			wantWhy:     "2 objects could not be rewritten",
		},
		{
			name:        "storage version flipped back",
			now:         with(func(s *crdStorage) { s.Generation, s.StorageVersion = 4, "v1" }),
			wantVerdict: pruneCRDChanged,
			wantWhy:     "the storage version changed from v2 to v1",
		},
		{
			name:        "storage version flipped and back again",
			now:         with(func(s *crdStorage) { s.Generation = 5 }),
			wantVerdict: pruneCRDChanged,
			wantWhy:     "the CRD changed (generation 3, now 5)",
		},
		{
			name:        "a changed CRD wins over failed objects",
			now:         with(func(s *crdStorage) { s.Generation = 4 }),
			failed:      1,
			wantVerdict: pruneCRDChanged,
			wantWhy:     "the CRD changed (generation 3, now 4)",
		},
		{
			name:        "deleted and created again under the same name",
			now:         with(func(s *crdStorage) { s.UID, s.Generation = "uid-2", 1 }),
			wantVerdict: pruneCRDChanged,
			wantWhy:     "the CRD was deleted and created again",
		},
		{
			name:        "deleted",
			now:         nil,
			wantVerdict: pruneCRDGone,
			wantWhy:     "the CRD was deleted",
		},
		{
			name:        "pruned by someone else meanwhile",
			now:         with(func(s *crdStorage) { s.StoredVersions = []string{"v2"} }),
			wantVerdict: pruneNothingLeft,
			wantWhy:     "status.storedVersions lists only the storage version already",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verdict, why := decidePrune(start, tt.now, tt.failed)
			if verdict != tt.wantVerdict || why != tt.wantWhy {
				t.Errorf("decidePrune = (%d, %q), want (%d, %q)", verdict, why, tt.wantVerdict, tt.wantWhy)
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
		if got := onlyStorage(crdStorage{StorageVersion: tt.storage, StoredVersions: tt.stored}); got != tt.want {
			t.Errorf("onlyStorage(storage %s, stored %v) = %v, want %v", tt.storage, tt.stored, got, tt.want)
		}
	}
}

func TestStorageOf(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{UID: "u", Generation: 7},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
			{Name: "v1", Served: true}, {Name: "v2", Served: true, Storage: true}, {Name: "v3"},
		}},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: []string{"v1", "v2"}},
	}
	want := crdStorage{UID: "u", Generation: 7, StorageVersion: "v2", StoredVersions: []string{"v1", "v2"}}
	if diff := cmp.Diff(want, storageOf(crd)); diff != "" {
		t.Errorf("storageOf (-want +got):\n%s", diff)
	}
}

func TestServedVersion(t *testing.T) {
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
			got, ok := servedVersion(crd)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("servedVersion = (%q, %v), want (%q, %v)", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestStorageTakenUp(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "widgets"}
	tests := []struct {
		name      string
		got, want string
		wantErr   bool
	}{
		{"discovery agrees", "abc", "abc", false},
		{"discovery reports no hash: cannot tell", "", "abc", false},
		{"discovery still reports the old version", "old", "abc", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := storageTakenUp(tt.got, tt.want, gvr, "v2")
			if (err != nil) != tt.wantErr {
				t.Fatalf("storageTakenUp = %v, want error: %v", err, tt.wantErr)
			}
			// Waiting is all it takes: it must be retried, not given up on.
			if err != nil && !IsTransient(err) {
				t.Errorf("storageTakenUp error %v is not transient", err)
			}
		})
	}
}

func TestCRDError(t *testing.T) {
	gr := schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}
	tests := []struct {
		name          string
		err           error
		wantReason    string
		wantTransient bool
	}{
		{"not found", apierrors.NewNotFound(gr, "widgets.example.com"), ReasonCRDNotFound, false},
		{"forbidden", apierrors.NewForbidden(gr, "widgets.example.com", errors.New("no")), ReasonForbidden, false},
		{"unauthorized", apierrors.NewUnauthorized("who"), ReasonForbidden, false},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "CustomResourceDefinition"}, "widgets.example.com", nil), ReasonCRDRejected, false},
		{"unavailable", apierrors.NewServiceUnavailable("busy"), "", true},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), "", true},
		{"cancelled", context.Canceled, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := crdError("read", "widgets.example.com", tt.err)
			if !errors.Is(err, tt.err) {
				t.Errorf("crdError = %v, which does not wrap %v", err, tt.err)
			}
			var terminal *TerminalError
			gotReason := ""
			if errors.As(err, &terminal) {
				gotReason = terminal.Reason
			}
			if gotReason != tt.wantReason || IsTransient(err) != tt.wantTransient {
				t.Errorf("crdError(%v): reason %q, transient %v; want %q, %v", tt.err, gotReason, IsTransient(err), tt.wantReason, tt.wantTransient)
			}
		})
	}
}

func TestDrainedAt(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	entry := func(sub string, at time.Time) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: "m", Subresource: sub, Time: &metav1.Time{Time: at}}
	}
	crd := func(entries ...metav1.ManagedFieldsEntry) *apiextensionsv1.CustomResourceDefinition {
		c := &apiextensionsv1.CustomResourceDefinition{}
		c.ManagedFields = entries
		return c
	}
	for _, tc := range []struct {
		name   string
		crd    *apiextensionsv1.CustomResourceDefinition
		margin time.Duration
		until  time.Time
		ok     bool
	}{
		{name: "changed a minute ago, the default margin", crd: crd(entry("", now.Add(-time.Minute))),
			until: now.Add(-time.Minute + time.Second + DefaultCRDDrainMargin), ok: true},
		{name: "the latest change counts", crd: crd(entry("", now.Add(-time.Hour)), entry("", now.Add(-10*time.Second))), margin: time.Minute,
			until: now.Add(-10*time.Second + time.Second + time.Minute), ok: true},
		{name: "a status write is no change of the spec", crd: crd(entry("", now.Add(-time.Hour)), entry("status", now)), margin: time.Minute},
		{name: "changed long ago", crd: crd(entry("", now.Add(-time.Hour))), margin: time.Minute},
		{name: "no managedFields: taken to have changed now", crd: crd(), margin: time.Minute, until: now.Add(time.Minute), ok: true},
		{name: "a negative margin does not wait", crd: crd(entry("", now)), margin: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			until, ok := drainedAt(tc.crd, tc.margin, now)
			if ok != tc.ok || ok && !until.Equal(tc.until) {
				t.Errorf("drainedAt = %s, %v; want %s, %v", until, ok, tc.until, tc.ok)
			}
		})
	}
}
