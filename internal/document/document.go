// Package document writes the reports svm commands print with -o json and
// -o yaml. Scripts parse these documents, so every command writes them
// alike: JSON indented by two spaces, and YAML with the field names of the
// JSON.
package document

import (
	"encoding/json"
	"io"

	"sigs.k8s.io/yaml"
)

// WriteJSON writes v as indented JSON, ending in a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteYAML writes v as YAML, with the field names of its JSON.
func WriteYAML(w io.Writer, v any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}
