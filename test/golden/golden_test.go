package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what the checks report.
type recorder struct {
	testing.TB
	errors []string
	fatal  bool
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.fatal = true
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

// record runs f as a test of its own would, so that a Fatal ends f and
// not the calling test, and returns what f reported.
func record(t *testing.T, f func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func check(t *testing.T, name, got string) *recorder {
	return record(t, func(tb testing.TB) { Check(tb, name, []byte(got)) })
}

func TestCheck(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.Mkdir("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "out.txt"), []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	if r := check(t, "out.txt", "one\ntwo\n"); len(r.errors) > 0 {
		t.Errorf("same output: %q", r.errors)
	}
	r := check(t, "out.txt", "one\nthree\n")
	if len(r.errors) != 1 || r.fatal || !strings.Contains(r.errors[0], "testdata/out.txt differs") || !strings.Contains(r.errors[0], "three") {
		t.Errorf("other output: errors %q, fatal %v; want one error showing the difference", r.errors, r.fatal)
	}
	r = check(t, "missing.txt", "x")
	if !r.fatal || !strings.Contains(r.errors[0], "-update") {
		t.Errorf("no golden file: errors %q, fatal %v; want a fatal error telling of -update", r.errors, r.fatal)
	}

	defer func(u bool) { *update = u }(*update)
	*update = true
	if r := check(t, "new.txt", "fresh\n"); len(r.errors) > 0 {
		t.Errorf("-update: %q", r.errors)
	}
	if data, err := os.ReadFile(filepath.Join("testdata", "new.txt")); err != nil || string(data) != "fresh\n" {
		t.Errorf("-update wrote %q, %v; want %q", data, err, "fresh\n")
	}
}

type doc struct {
	Version string `json:"version"`
	Count   int    `json:"count"`
	// Hidden is lost in any document.
	Hidden string `json:"-"`
}

func TestDecodes(t *testing.T) {
	tests := []struct {
		name      string
		decode    func(testing.TB, []byte, *doc)
		data      string
		want      doc
		wantError string
		wantFatal bool
	}{
		{name: "json", decode: DecodesJSON[doc], data: `{"version": "v1", "count": 2}`, want: doc{Version: "v1", Count: 2}},
		{name: "json, a field the type lacks", decode: DecodesJSON[doc], data: `{"version": "v1", "extra": 1}`, want: doc{Version: "v1"},
			wantError: "the JSON does not decode", wantFatal: true},
		{name: "json, a field lost", decode: DecodesJSON[doc], data: `{"version": "v1"}`, want: doc{Version: "v1", Hidden: "x"},
			wantError: "JSON round trip"},
		{name: "yaml", decode: DecodesYAML[doc], data: "version: v1\ncount: 2\n", want: doc{Version: "v1", Count: 2}},
		{name: "yaml, a field the type lacks", decode: DecodesYAML[doc], data: "version: v1\nextra: 1\n", want: doc{Version: "v1"},
			wantError: "the YAML does not decode", wantFatal: true},
		{name: "yaml, a value changed", decode: DecodesYAML[doc], data: "version: v1\ncount: 3\n", want: doc{Version: "v1", Count: 2},
			wantError: "YAML round trip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := record(t, func(tb testing.TB) { tt.decode(tb, []byte(tt.data), &tt.want) })
			if tt.wantError == "" {
				if len(r.errors) > 0 {
					t.Errorf("errors %q, want none", r.errors)
				}
				return
			}
			if len(r.errors) != 1 || !strings.Contains(r.errors[0], tt.wantError) || r.fatal != tt.wantFatal {
				t.Errorf("errors %q, fatal %v; want one containing %q, fatal %v", r.errors, r.fatal, tt.wantError, tt.wantFatal)
			}
		})
	}
}
