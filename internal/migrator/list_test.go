package migrator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

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
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
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
		wantHeld      []held
		wantMeta      metav1.ListMeta
		wantCut       bool
	}{{
		name:  "only what the engine needs",
		body:  listBody(item(0, 10, "v1"), item(1, 10, "v1")),
		limit: 500, budget: 1 << 20,
		want:     []metav1.PartialObjectMetadata{listedObject(0), listedObject(1)},
		wantHeld: []held{{"v1"}, {"v1"}},
		wantMeta: meta,
	}, {
		name:  "managedFields only when they name a retired version",
		body:  listBody(item(0, 10, "example.com/v1"), item(1, 10, "example.com/v2")),
		limit: 500, budget: 1 << 20, keep: names("example.com/v1"),
		want:     []metav1.PartialObjectMetadata{listedObject(0, entry), listedObject(1)},
		wantHeld: []held{{"example.com/v1"}, {"example.com/v2"}},
		wantMeta: meta,
	}, {
		name: "the versions entries name, each once, and none",
		body: listBody(strings.Replace(item(0, 10, "example.com/v1"), `"managedFields":[`,
			`"managedFields":[{"manager":"a","apiVersion":"example.com/v2","fieldsV1":{"f:spec":{}}},{"manager":"b","apiVersion":"example.com/v1"},`, 1),
			strings.Replace(item(1, 10, "v1"), `"managedFields"`, `"unknown"`, 1)),
		limit: 500, budget: 1 << 20,
		want:     []metav1.PartialObjectMetadata{listedObject(0), listedObject(1)},
		wantHeld: []held{{"example.com/v2", "example.com/v1"}, nil},
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
			if tc.wantHeld != nil {
				if diff := cmp.Diff(tc.wantHeld, l.held); diff != "" {
					t.Errorf("held (-want +got):\n%s", diff)
				}
			}
			if len(l.held) != len(l.list.Items) {
				t.Errorf("%d held for %d items", len(l.held), len(l.list.Items))
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

func TestReadAnswer(t *testing.T) {
	bigKey := `"` + strings.Repeat("k", 1000) + `"`
	for _, tc := range []struct {
		name, body string
		entries    bool
		want       writeAnswer
		wantErr    string
	}{
		{name: "kube-apiserver's order", body: item(7, 1000, "v1"), want: writeAnswer{resourceVersion: "107"}},
		{name: "kube-apiserver's order, with entries", body: item(7, 1000, "v1"), entries: true, want: writeAnswer{resourceVersion: "107", entriesRead: true, hasEntries: true}},
		{name: "no managedFields", body: `{"metadata":{"resourceVersion":"5","annotations":{"a":"}]\\\"{"}}}`, entries: true, want: writeAnswer{resourceVersion: "5", entriesRead: true}},
		{name: "empty managedFields", body: `{"metadata":{"resourceVersion":"5","managedFields":[ ]}}`, entries: true, want: writeAnswer{resourceVersion: "5", entriesRead: true}},
		{name: "null managedFields", body: `{"metadata":{"resourceVersion":"5","managedFields":null}}`, entries: true, want: writeAnswer{resourceVersion: "5", entriesRead: true}},
		{name: "managedFields before the resourceVersion", body: `{"metadata":{"managedFields":[{"manager":"m","fieldsV1":{"f:spec":{".":{}}}}],"labels":{"a":"b"},"resourceVersion":"6"},"spec":[1,true,null]}`, entries: true, want: writeAnswer{resourceVersion: "6", entriesRead: true, hasEntries: true}},
		{name: "metadata last", body: `{"kind":"X","spec":{"a":["b", 1.5e3, false]},"metadata":{"annotations":{"a":"b"},"resourceVersion":"5"}}`, want: writeAnswer{resourceVersion: "5"}},
		{name: "a long key and escapes", body: `{"metadata":{` + bigKey + `:"x","resourceVersion":"\u0038"}}`, want: writeAnswer{resourceVersion: "8"}},
		{name: "empty metadata", body: `{"metadata":{}}`, wantErr: "no resourceVersion"},
		{name: "no resourceVersion", body: `{"metadata":{"name":"a"}}`, wantErr: "no resourceVersion"},
		{name: "no metadata", body: `{"kind":"X"}`, wantErr: "no metadata"},
		{name: "a resourceVersion outside metadata does not count", body: `{"resourceVersion":"1","metadata":{"resourceVersion":"2"}}`, want: writeAnswer{resourceVersion: "2"}},
		{name: "cut off", body: `{"metadata":{"annotations":{"a":"b`, wantErr: "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := strings.NewReader(tc.body)
			got, err := readAnswer(r, tc.entries)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("readAnswer = %+v, %v; want %+v", got, err, tc.want)
			}
			if r.Len() != 0 {
				t.Errorf("%d bytes of the answer left unread: the connection cannot serve another request", r.Len())
			}
		})
	}
}

// TestReadAnswerSkipsAnyString reads answers whose annotations, before
// the resourceVersion and managedFields, hold strings of quotes and
// backslashes, of every length around the reader's buffer, as
// encoding/json writes them.
func TestReadAnswerSkipsAnyString(t *testing.T) {
	pieces := []string{`"`, `\`, `\"`, `a`, `é`, "\n", `\\"`, `}`, `]`}
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		var b strings.Builder
		for b.Len() < 4090+rnd.IntN(20) || (i%3 == 0 && b.Len() < 12) {
			b.WriteString(pieces[rnd.IntN(len(pieces))])
		}
		value := b.String()
		switch {
		case i%3 == 0:
			value = value[:i%12]
		case i < 60:
			// A run of backslashes across the end of the reader's buffer,
			// then a quote.
			value = strings.Repeat("a", 4040+i) + strings.Repeat(`\`, 7) + `"b`
		}
		meta := map[string]any{
			"name":        "o",
			"annotations": map[string]string{value: value, "k": value},
			"labels":      map[string]string{"a": value},
		}
		body, err := json.Marshal(map[string]any{"metadata": meta})
		if err != nil {
			t.Fatal(err)
		}
		// Keys in encoding/json's order: annotations, labels, managedFields,
		// name, resourceVersion.
		body = bytes.Replace(body, []byte(`"name":"o"`), []byte(`"managedFields":[{"manager":"m"}],"name":"o","resourceVersion":"42"`), 1)
		if !json.Valid(body) {
			t.Fatalf("test body %d is not JSON", i)
		}
		r := bytes.NewReader(body)
		got, err := readAnswer(r, true)
		if want := (writeAnswer{resourceVersion: "42", entriesRead: true, hasEntries: true}); err != nil || got != want {
			t.Fatalf("value %d (%d bytes): readAnswer = %+v, %v; want %+v", i, len(value), got, err, want)
		}
		if r.Len() != 0 {
			t.Fatalf("value %d: %d bytes left unread", i, r.Len())
		}
	}
}

// TestScannerReadsStringsWhole reads strings that end in runs of
// backslashes and quotes, placed across the end of the reader's buffer,
// as encoding/json writes them, and keeps them whole.
func TestScannerReadsStringsWhole(t *testing.T) {
	for n := 4070; n < 4100; n++ {
		for _, tail := range []string{`\`, `\\`, `\"`, `"`, `\\\\\\\"x`} {
			want := strings.Repeat("a", n) + tail
			body, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			s := &scanner{r: bufio.NewReader(io.MultiReader(bytes.NewReader(body), strings.NewReader(",")))}
			got, err := s.str(1 << 20)
			if err != nil || got != want {
				t.Fatalf("%d a's, then %q: str read %d bytes, %v", n, tail, len(got), err)
			}
			if b, err := s.peek(); err != nil || b != ',' {
				t.Fatalf("%d a's, then %q: next %q, %v; want ','", n, tail, b, err)
			}
		}
	}
}

// TestReadAnswerHoldsNoAnnotation reads, for managedFields, the answers
// of 50 objects whose annotations weigh 200 KB each: what is allocated
// is the reader's buffer, not the annotations.
func TestReadAnswerHoldsNoAnnotation(t *testing.T) {
	body := []byte(item(1, 200_000, "v1"))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 50 {
		a, err := readAnswer(bytes.NewReader(body), true)
		if err != nil || !a.hasEntries {
			t.Fatalf("readAnswer = %+v, %v", a, err)
		}
	}
	runtime.ReadMemStats(&after)
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 1<<20 {
		t.Errorf("reading 50 answers of %d bytes allocated %d bytes, want at most 1 MiB", len(body), allocated)
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
