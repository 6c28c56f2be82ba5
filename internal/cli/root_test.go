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
		{name: "controller: endpoint not https", args: []string{"controller", "--apiserver-endpoints", "https://10.0.0.1:6443,http://10.0.0.2:6443"}, wantCode: 1,
			wantErr: "svm: --apiserver-endpoints: \"http://10.0.0.2:6443\" is not an https://host:port URL"},
		{name: "controller: no check interval", args: []string{"controller", "--encryption-check-interval", "0s"}, wantCode: 1,
			wantErr: "svm: --encryption-check-interval must be positive, got 0s"},
		{name: "controller: empty resource name", args: []string{"controller", "--encrypted-resources", "secrets,,configmaps"}, wantCode: 1,
			wantErr: "svm: --encrypted-resources has an empty name in \"secrets,,configmaps\""},
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
