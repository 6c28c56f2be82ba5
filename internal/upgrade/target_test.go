package upgrade

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	widgets     = schema.GroupResource{Group: "example.com", Resource: "widgets"}
	deployments = schema.GroupResource{Group: "apps", Resource: "deployments"}
	events      = schema.GroupResource{Resource: "events"}
)

func gv(group, version string) schema.GroupVersion {
	return schema.GroupVersion{Group: group, Version: version}
}

// checkParsed holds the target parsed and the error of parsing to want, or
// to an error containing wantErr when that is set.
func checkParsed(t *testing.T, got Target, err error, want Target, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error %v, want one containing %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseDecodable(t *testing.T) {
	tests := []struct {
		name    string
		flags   []string
		want    Target
		wantErr string
	}{
		{name: "one version", flags: []string{"widgets.example.com=v2"}, want: Target{widgets: {gv("example.com", "v2")}}},
		{name: "several, sorted by priority", flags: []string{"deployments.apps=v1,v1beta2, v1beta1"},
			want: Target{deployments: {gv("apps", "v1beta1"), gv("apps", "v1beta2"), gv("apps", "v1")}}},
		{name: "core group", flags: []string{"events=v1"}, want: Target{events: {gv("", "v1")}}},
		{name: "another group's version", flags: []string{"events=events.k8s.io/v1,v1"},
			want: Target{events: {gv("", "v1"), gv("events.k8s.io", "v1")}}},
		{name: "repeated flags add up", flags: []string{"widgets.example.com=v2", "widgets.example.com=v1,v2"},
			want: Target{widgets: {gv("example.com", "v1"), gv("example.com", "v2")}}},
		{name: "no equals sign", flags: []string{"widgets.example.com"}, wantErr: "want RESOURCE[.GROUP]=VERSION"},
		{name: "no versions", flags: []string{"widgets.example.com="}, wantErr: "version \"\""},
		{name: "bad version", flags: []string{"widgets.example.com=V2"}, wantErr: "version \"V2\""},
		{name: "bad resource", flags: []string{"Widgets.example.com=v2"}, wantErr: "resource \"Widgets.example.com\""},
		{name: "bad group", flags: []string{"widgets.example_com=v2"}, wantErr: "group of \"widgets.example_com\""},
		{name: "bad group in version", flags: []string{"events=Events/v1"}, wantErr: "version \"Events/v1\": group"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Target{}
			var err error
			for _, f := range tt.flags {
				if err = got.ParseDecodable(f); err != nil {
					break
				}
			}
			checkParsed(t, got, err, tt.want, tt.wantErr)
		})
	}
}

func TestParseFile(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		want    Target
		wantErr string
	}{
		{name: "yaml", file: `
version: v1
decodable:
  widgets.example.com: [v2]
  deployments.apps: [v1, v1beta2]
  events: [v1, events.k8s.io/v1]
`, want: Target{
			widgets:     {gv("example.com", "v2")},
			deployments: {gv("apps", "v1beta2"), gv("apps", "v1")},
			events:      {gv("", "v1"), gv("events.k8s.io", "v1")},
		}},
		{name: "json, no version", file: `{"decodable": {"widgets.example.com": ["v1", "v2"]}}`,
			want: Target{widgets: {gv("example.com", "v1"), gv("example.com", "v2")}}},
		{name: "unknown field", file: "decodeable:\n  widgets.example.com: [v2]\n", wantErr: "unknown field \"decodeable\""},
		{name: "other format version", file: "version: v2\ndecodable:\n  widgets.example.com: [v2]\n", wantErr: "the only format is v1"},
		{name: "empty", file: "version: v1\n", wantErr: "names no resources"},
		{name: "resource without versions", file: "decodable:\n  widgets.example.com: []\n", wantErr: "decodable \"widgets.example.com\": no versions"},
		{name: "versions not a list", file: "decodable:\n  widgets.example.com: v2\n", wantErr: "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Target{}
			err := got.ParseFile([]byte(tt.file))
			checkParsed(t, got, err, tt.want, tt.wantErr)
		})
	}
}

func TestStorageVersionResource(t *testing.T) {
	tests := []struct {
		name string
		want schema.GroupResource
		ok   bool
	}{
		{"apps.deployments", deployments, true},
		{"core.events", events, true},
		{"admissionregistration.k8s.io.validatingwebhookconfigurations", schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}, true},
		{"nodots", schema.GroupResource{}, false},
		{".leading", schema.GroupResource{}, false},
		{"trailing.", schema.GroupResource{}, false},
	}
	for _, tt := range tests {
		got, ok := StorageVersionResource(tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("StorageVersionResource(%q) = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
