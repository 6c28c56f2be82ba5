package framework

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// DecodeManifests splits a multi-document YAML stream into objects, with
// integers as int64 whichever tool printed them, so that objects of kubectl
// kustomize and of helm template compare equal when they are.
func DecodeManifests(t testing.TB, what, manifests string) []*unstructured.Unstructured {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifests)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("read %s: %v", what, err)
		}
		js, err := sigsyaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		if s := string(bytes.TrimSpace(js)); s == "null" || s == "{}" {
			continue // a document of comments only
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(js); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		objs = append(objs, o)
	}
}
