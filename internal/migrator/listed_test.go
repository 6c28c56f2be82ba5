package migrator

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestNextLimitKeepsAChunkWithinItsBytes(t *testing.T) {
	r := &run{m: &Migrator{opts: Options{ChunkSize: 500}}}
	for _, tc := range []struct {
		largest int
		want    int64
	}{
		{0, 500},               // an empty chunk says nothing of the size
		{1 << 10, 500},         // 500 objects of a kilobyte: half a megabyte
		{64 << 10, 256},        // 16 MiB of 64 KiB objects
		{1 << 20, 16},          // Secrets of a MiB
		{maxChunkBytes * 2, 1}, // never less than one
	} {
		if got := r.nextLimit(&chunk{largest: tc.largest}); got != tc.want {
			t.Errorf("after a chunk whose largest object is %d bytes: limit %d, want %d", tc.largest, got, tc.want)
		}
	}
}

func TestWithTypeNamesTheKindABuiltInListLeftOut(t *testing.T) {
	r := &run{kind: "Secret", req: Request{Resource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}}}
	body := r.withType([]byte(`{"metadata":{"name":"s"},"data":{"k":"dg=="}}`), "")
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if got["kind"] != "Secret" || got["apiVersion"] != "v1" || got["data"].(map[string]any)["k"] != "dg==" {
		t.Errorf("body %s: want the object with kind Secret and apiVersion v1", body)
	}
	// A custom resource's items carry their type: left as they came.
	item := []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"}}`)
	if got := r.withType(item, "Widget"); string(got) != string(item) {
		t.Errorf("an item with its kind became %s", got)
	}
}
