package migration

import "testing"

func TestSameStorage(t *testing.T) {
	tests := []struct {
		saved, now string
		want       bool
	}{
		{"", "", true},
		{"crd=1/v2", "crd=1/v2", true},
		{"crd=1/v2", "crd=2/v1", false},
		{"crd=1/v2", "crd=2/v2", false},
		{"storageversion=10", "storageversion=11", false},
		// The CRD was deleted, with every object of its resource.
		{"crd=1/v2", "", true},
		{"crd=1/v2,storageversion=10", "storageversion=10", true},
		{"crd=1/v2,storageversion=10", "storageversion=11", false},
		// A CRD appearing is a change.
		{"", "crd=1/v1", false},
	}
	for _, tt := range tests {
		if got := sameStorage(tt.saved, Fingerprint{Value: tt.now}); got != tt.want {
			t.Errorf("sameStorage(%q, %q) = %v, want %v", tt.saved, tt.now, got, tt.want)
		}
	}
}
