package migrator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// item is a listed object's JSON as kube-apiserver writes it, with an
// annotation of annotation bytes and managedFields naming apiVersion.
func item(i, annotation int, apiVersion string) string {
	return fmt.Sprintf(`{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"o-%d","namespace":"ns","uid":"u-%d","resourceVersion":"%d","creationTimestamp":"2026-01-01T00:00:00Z","labels":{"a":"b"},"annotations":{"big":"%s"},"managedFields":[{"manager":"m","operation":"Update","apiVersion":%q,"fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{}}}]}}`,
		i, i, 100+i, strings.Repeat("x", annotation), apiVersion)
}

// listBody is a list's answer of the items, in kube-apiserver's order.
func listBody(items ...string) string {
	return `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"99","continue":"next","remainingItemCount":7},"items":[` +
		strings.Join(items, ",") + `]}`
}

func listedObject(i int, entries ...metav1.ManagedFieldsEntry) metav1.PartialObjectMetadata {
	return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: fmt.Sprintf("o-%d", i), Namespace: "ns", UID: types.UID(fmt.Sprintf("u-%d", i)), ResourceVersion: fmt.Sprint(100 + i), ManagedFields: entries,
	}}
}

func TestDecodeList(t *testing.T) {
	names := func(apiVersion string) func([]metav1.ManagedFieldsEntry) bool {
		return func(entries []metav1.ManagedFieldsEntry) bool { return entries[0].APIVersion == apiVersion }
	}
	var entry metav1.ManagedFieldsEntry
	if err := json.Unmarshal([]byte(`{"manager":"m","operation":"Update","apiVersion":"example.com/v1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{}}}`), &entry); err != nil {
		t.Fatal(err)
	}
	remaining := int64(7)
	meta := metav1.ListMeta{ResourceVersion: "99", Continue: "next", RemainingItemCount: &remaining}
	one := int64(len(item(0, 10, "v1")) + 1) // with the comma before it
	for _, tc := range []struct {
		name          string
		body          string
		limit, budget int64
		keep          func([]metav1.ManagedFieldsEntry) bool
		want          []metav1.PartialObjectMetadata
		wantMeta      metav1.ListMeta
		wantCut       bool
	}{{
		name:  "only what the engine needs",
		body:  listBody(item(0, 10, "v1"), item(1, 10, "v1")),
		limit: 500, budget: 1 << 20,
		want:     []metav1.PartialObjectMetadata{listedObject(0), listedObject(1)},
		wantMeta: meta,
	}, {
		name:  "managedFields only when they name a retired version",
		body:  listBody(item(0, 10, "example.com/v1"), item(1, 10, "example.com/v2")),
		limit: 500, budget: 1 << 20, keep: names("example.com/v1"),
		want:     []metav1.PartialObjectMetadata{listedObject(0, entry), listedObject(1)},
		wantMeta: meta,
	}, {
		name:  "items before the list's metadata, and fields svm does not know",
		body:  `{"items":[` + item(0, 10, "v1") + `],"extra":{"a":[1,{"b":null}]},"metadata":{"resourceVersion":"99"}}`,
		limit: 500, budget: 1 << 20,
		want:     []metav1.PartialObjectMetadata{listedObject(0)},
		wantMeta: metav1.ListMeta{ResourceVersion: "99"},
	}, {
		name:  "no items",
		body:  `{"kind":"PartialObjectMetadataList","metadata":{"resourceVersion":"99"},"items":null}`,
		limit: 500, budget: 1 << 20,
		wantMeta: metav1.ListMeta{ResourceVersion: "99"},
	}, {
		name:  "cut once the items reach the budget short of the limit",
		body:  listBody(item(0, 10, "v1"), item(1, 10, "v1"), item(2, 10, "v1"), item(3, 10, "v1")),
		limit: 4, budget: one + 1,
		want:     []metav1.PartialObjectMetadata{listedObject(0), listedObject(1)},
		wantMeta: meta,
		wantCut:  true,
	}, {
		name:  "not cut at the limit: asked for no fewer, it would bring the same",
		body:  listBody(item(0, 10, "v1"), item(1, 10, "v1")),
		limit: 2, budget: one,
		want:     []metav1.PartialObjectMetadata{listedObject(0), listedObject(1)},
		wantMeta: meta,
	}, {
		name:  "a server that sends more than the limit is read to the end",
		body:  listBody(item(0, 10, "v1"), item(1, 10, "v1"), item(2, 10, "v1")),
		limit: 1, budget: one,
		want:     []metav1.PartialObjectMetadata{listedObject(0), listedObject(1), listedObject(2)},
		wantMeta: meta,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := decodeList(strings.NewReader(tc.body), tc.limit, tc.budget, tc.keep)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, l.list.Items); diff != "" {
				t.Errorf("items (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantMeta, l.list.ListMeta); diff != "" {
				t.Errorf("list metadata (-want +got):\n%s", diff)
			}
			if l.cut != tc.wantCut {
				t.Errorf("cut = %v, want %v", l.cut, tc.wantCut)
			}
			if l.bytes < int64(len(tc.want))*(one-1) {
				t.Errorf("bytes = %d for %d items of %d", l.bytes, len(tc.want), one)
			}
		})
	}
}

func TestDecodeListTruncatedIsTransient(t *testing.T) {
	body := listBody(item(0, 10, "v1"), item(1, 10, "v1"))
	_, err := decodeList(strings.NewReader(body[:len(body)/2]), 500, 1<<20, nil)
	if err == nil || !IsTransient(err) {
		t.Errorf("a list cut off halfway: error %v, want a transient one", err)
	}
}

// TestDecodeListHoldsOneItemAtATime decodes a list of 200 objects whose
// annotations weigh 100 KB each (20 MB of answer) and counts the bytes
// allocated: about one object's worth (the decoder's buffer), not the
// list's.
func TestDecodeListHoldsOneItemAtATime(t *testing.T) {
	items := make([]string, 200)
	for i := range items {
		items[i] = item(i, 100_000, "v1")
	}
	body := []byte(listBody(items...))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l, err := decodeList(bytes.NewReader(body), 500, int64(len(body)), nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.list.Items) != len(items) {
		t.Fatalf("%d items, want %d", len(l.list.Items), len(items))
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 1<<20 {
		t.Errorf("decoding %d bytes of list allocated %d bytes, want at most 1 MiB", len(body), allocated)
	} else {
		t.Logf("decoding %d bytes of list allocated %d bytes", len(body), allocated)
	}
}

// TestDecodeListStopsReadingAtTheCut shows that a cut list is not read
// further: the server stops sending when svm closes the answer.
func TestDecodeListStopsReadingAtTheCut(t *testing.T) {
	items := make([]string, 100)
	for i := range items {
		items[i] = item(i, 10_000, "v1")
	}
	r := &countingReader{r: strings.NewReader(listBody(items...))}
	l, err := decodeList(r, 500, 50_000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !l.cut || len(l.list.Items) != 5 {
		t.Fatalf("cut %v after %d items, want after 5", l.cut, len(l.list.Items))
	}
	if r.n > 100_000 {
		t.Errorf("read %d bytes of the answer for a budget of 50,000", r.n)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestReadResourceVersion(t *testing.T) {
	for _, tc := range []struct {
		name, body, want, wantErr string
	}{
		{name: "kube-apiserver's order", body: item(7, 1000, "v1"), want: "107"},
		{name: "metadata last", body: `{"kind":"X","spec":{"a":["b"]},"metadata":{"annotations":{"a":"b"},"resourceVersion":"5"}}`, want: "5"},
		{name: "no resourceVersion", body: `{"metadata":{"name":"a"}}`, wantErr: "no resourceVersion"},
		{name: "no metadata", body: `{"kind":"X"}`, wantErr: "no metadata"},
		{name: "a resourceVersion outside metadata does not count", body: `{"resourceVersion":"1","metadata":{"resourceVersion":"2"}}`, want: "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := strings.NewReader(tc.body)
			got, err := readResourceVersion(r)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("readResourceVersion = %q, %v; want %q", got, err, tc.want)
			}
			if r.Len() != 0 {
				t.Errorf("%d bytes of the answer left unread: the connection cannot serve another request", r.Len())
			}
		})
	}
}

func TestChunkSizer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		objects int
		bytes   int64
		want    int64
	}{
		{name: "before any chunk: the chunk size", want: 500},
		{name: "small objects: the chunk size", objects: 500, bytes: 500 * 1000, want: 500},
		{name: "large objects: as many as fit", objects: 100, bytes: 100 * (256 << 10), want: 32},
		{name: "larger than the budget: one at a time", objects: 1, bytes: 16 << 20, want: 1},
		{name: "an empty chunk tells nothing", objects: 0, bytes: 0, want: 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := chunkSizer{most: 500, budget: 8 << 20}
			if tc.objects > 0 || tc.bytes > 0 {
				s.seen(tc.objects, tc.bytes)
			}
			if got := s.limit(); got != tc.want {
				t.Errorf("limit = %d, want %d", got, tc.want)
			}
		})
	}
}
