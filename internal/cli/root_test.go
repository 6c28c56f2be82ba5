package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestMain(t *testing.T) {
	tests := []struct {
		name             string
		args             []string
		wantCode         int
		wantOut, wantErr string
	}{
		{name: "version", args: []string{"version"}, wantOut: Version + "\n"},
		{name: "unknown command", args: []string{"frobnicate"}, wantCode: 1, wantErr: "svm: unknown command \"frobnicate\""},
		{name: "extra argument", args: []string{"version", "x"}, wantCode: 1, wantErr: "svm: unknown command \"x\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Main(tt.args, &out, &errOut); code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.wantCode, errOut.String())
			}
			if out.String() != tt.wantOut {
				t.Errorf("stdout %q, want %q", out.String(), tt.wantOut)
			}
			if !strings.HasPrefix(errOut.String(), tt.wantErr) {
				t.Errorf("stderr %q, want prefix %q", errOut.String(), tt.wantErr)
			}
		})
	}
}
