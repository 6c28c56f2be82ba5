package operation

import (
	"context"
	"errors"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

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
