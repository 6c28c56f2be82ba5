// Package golden checks, in tests, what svm commands print. Output is held
// to files under testdata, so that a change to it shows in review as a
// change to those files; running the tests with -update rewrites them from
// the current output. The documents scripts read (-o json, -o yaml) are
// also held to their type: a script gets nothing but the documented
// structure, so a document must decode into it, field for field.
package golden

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata from the current output")

// Check compares got with the file testdata/name, or writes it there when
// the tests run with -update.
func Check(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update in this package writes it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update in this package rewrites it):\n%s", path, diff)
	}
}

// DecodesJSON checks that the JSON document data decodes into a T, with no
// field T lacks, equal to want.
func DecodesJSON[T any](t testing.TB, data []byte, want *T) {
	t.Helper()
	back := new(T)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(back); err != nil {
		t.Fatalf("the JSON does not decode: %v", err)
	}
	if diff := cmp.Diff(want, back); diff != "" {
		t.Errorf("JSON round trip (-built +decoded):\n%s", diff)
	}
}

// DecodesYAML checks that the YAML document data decodes into a T, with no
// field T lacks, equal to want.
func DecodesYAML[T any](t testing.TB, data []byte, want *T) {
	t.Helper()
	back := new(T)
	if err := yaml.UnmarshalStrict(data, back); err != nil {
		t.Fatalf("the YAML does not decode: %v", err)
	}
	if diff := cmp.Diff(want, back); diff != "" {
		t.Errorf("YAML round trip (-built +decoded):\n%s", diff)
	}
}
