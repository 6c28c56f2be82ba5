package fingerprint

import "testing"

func TestCRDGeneration(t *testing.T) {
	for _, tc := range []struct {
		v      string
		want   int64
		wantOK bool
	}{
		{"crd=uid-1/7/v2", 7, true},
		{"crd=uid-1/5..7/v2,storageversion=12", 7, true},
		{"storageversion=12", 0, false},
		{"", 0, false},
		{"crd=7/v2", 0, false}, // written before the UID was part of it
	} {
		if got, ok := CRDGeneration(tc.v); got != tc.want || ok != tc.wantOK {
			t.Errorf("CRDGeneration(%q) = %d, %v; want %d, %v", tc.v, got, ok, tc.want, tc.wantOK)
		}
	}
}
