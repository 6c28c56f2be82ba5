package document

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

type report struct {
	Version string   `json:"version"`
	Names   []string `json:"names"`
	Note    string   `json:"note,omitempty"`
}

func TestWrite(t *testing.T) {
	r := report{Version: "v1", Names: []string{"a", "b"}}
	tests := []struct {
		name  string
		write func(io.Writer, any) error
		want  string
	}{
		{"json", WriteJSON, "{\n  \"version\": \"v1\",\n  \"names\": [\n    \"a\",\n    \"b\"\n  ]\n}\n"},
		{"yaml", WriteYAML, "names:\n- a\n- b\nversion: v1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tt.write(&b, r); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tt.want)
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteReturnsWriteErrors(t *testing.T) {
	if err := WriteJSON(failingWriter{}, report{}); err == nil {
		t.Error("WriteJSON to a failing writer: no error")
	}
	if err := WriteYAML(failingWriter{}, report{}); err == nil {
		t.Error("WriteYAML to a failing writer: no error")
	}
}
