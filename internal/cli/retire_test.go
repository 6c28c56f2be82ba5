package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestRetireBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"retire"}, "accepts 1 arg"},
		{[]string{"retire", "widgets"}, "name the version to retire as RESOURCE.VERSION.GROUP"},
		{[]string{"retire", "widgets."}, "name the version to retire as RESOURCE.VERSION.GROUP"},
		{[]string{"retire", "configmaps.v1"}, "the core group has one version"},
		{[]string{"retire", "widgets.v1.example.com", "--quiet-for", "0s"}, "--quiet-for must be positive"},
		{[]string{"retire", "widgets.v1.example.com", "-o", "wide"}, "--output must be one of table, json, yaml"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(tt.args, &out, &errOut)
			if code != 1 || !strings.Contains(errOut.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, errOut.String(), tt.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q on bad input", out.String())
			}
		})
	}
}
