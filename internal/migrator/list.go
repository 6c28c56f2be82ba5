package migrator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultChunkBytes is how many bytes of object metadata a list brings at
// most by default (Options.ChunkBytes): a few hundred objects whose
// metadata is a kilobyte or two, thirty-odd whose annotations are at the
// API's limit (256 KiB).
const DefaultChunkBytes = 8 << 20

// Lists and write answers are asked for in JSON, which svm decodes as it
// arrives (see decodeList and readAnswer). A server that cannot
// serve metadata alone sends whole objects, of which svm keeps the same
// few fields.
const (
	metadataListJSON = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
	metadataJSON     = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
)

// Tally is what Count found.
type Tally struct {
	// Objects counts the objects, Matched those whose managedFields the
	// match given matched, and CreatedBefore those created before the
	// time given (none when it is zero).
	Objects, Matched, CreatedBefore int64
}

// Count lists every object of gvr as a migration does, within
// Options.ChunkBytes and decoded as the answers arrive, and counts them,
// those whose managedFields match says match (match(nil) is false), and
// those created before before. It writes nothing.
func (m *Migrator) Count(ctx context.Context, gvr schema.GroupVersionResource, match func([]metav1.ManagedFieldsEntry) bool, before time.Time) (Tally, error) {
	r := &run{m: m, req: Request{Resource: gvr}, gr: gvr.GroupResource(), observer: NopObserver{}, keep: match,
		sizer: chunkSizer{most: m.opts.ChunkSize, budget: m.opts.ChunkBytes}}
	var n Tally
	for token := ""; ; {
		l, err := r.list(ctx, token)
		if err != nil {
			return n, err
		}
		list := l.list
		for i := range list.Items {
			n.Objects++
			// Entries are kept only when they match.
			if list.Items[i].ManagedFields != nil {
				n.Matched++
			}
			if list.Items[i].CreationTimestamp.Time.Before(before) {
				n.CreatedBefore++
			}
		}
		if token = list.Continue; token == "" {
			return n, nil
		}
	}
}

// listed is one list's answer.
type listed struct {
	list *metav1.PartialObjectMetadataList
	// held is, item by item, what its managedFields held (see entries.go).
	held []held
	// bytes is the size of the items as the server sent them.
	bytes int64
	// cut says the list was abandoned once its items reached the budget,
	// short of its limit: it holds the items read until then, and the
	// rest of the answer was never read.
	cut bool
}

// listChunk lists the metadata of up to limit objects from token: all the
// engine needs to write an object back. The answer is decoded as it
// arrives, one object at a time, keeping of each its namespace, name, uid
// and resourceVersion, the apiVersions its managedFields entries name (see
// held), and its entries only in a run that moves them and only when they
// name a retired version. So the answer never
// sits whole in svm's memory, whatever the objects' size, and svm never
// receives their content (a Secret's data). Once the items read reach
// Options.ChunkBytes short of limit, the answer is abandoned (see
// listed.cut and run.list).
func (r *run) listChunk(ctx context.Context, token string, limit int64) (listed, error) {
	req := r.m.rest.Get().AbsPath(resourcePath(r.req.Resource, "", "")...).
		Param("limit", strconv.FormatInt(limit, 10)).
		SetHeader("Accept", metadataListJSON)
	if token != "" {
		req = req.Param("continue", token)
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return listed{}, err
	}
	// Closed unread after a cut: the server stops sending.
	defer body.Close()
	l, err := decodeList(body, limit, r.m.opts.ChunkBytes, r.keep)
	if err == nil && !l.cut {
		// Drained (the newline after the JSON), so that the connection
		// serves the next request.
		_, err = io.Copy(io.Discard, body)
	}
	if err != nil {
		return listed{}, fmt.Errorf("read the list of %s: %w", r.req.Resource.Resource, err)
	}
	return l, nil
}

// decodeList reads a list's answer from body item by item: only one
// item's JSON is held at a time. Items keep their namespace, name, uid and
// resourceVersion, and, when keep is set and says so, their managedFields;
// what their entries held is beside them (listed.held).
// Once the items read weigh budget bytes or more and fewer than limit were
// read, it stops reading and returns them, cut. A server that sends more
// than limit (one that does not paginate) is read to the end: asking it
// for fewer would not help.
func decodeList(body io.Reader, limit, budget int64, keep func([]metav1.ManagedFieldsEntry) bool) (listed, error) {
	dec := json.NewDecoder(body)
	l := listed{list: &metav1.PartialObjectMetadataList{}}
	if err := expectDelim(dec, '{'); err != nil {
		return l, err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return l, err
		}
		switch key {
		case "metadata":
			err = dec.Decode(&l.list.ListMeta)
		case "items":
			err = decodeItems(dec, &l, limit, budget, keep)
		default:
			err = skipValue(dec)
		}
		if err != nil || l.cut {
			return l, err
		}
	}
	return l, expectDelim(dec, '}')
}

// decodeItems reads the items array of a list (see decodeList).
func decodeItems(dec *json.Decoder, l *listed, limit, budget int64, keep func([]metav1.ManagedFieldsEntry) bool) error {
	t, err := dec.Token()
	switch {
	case err != nil:
		return err
	case t == nil:
		return nil // "items": null, an empty list
	case t != json.Delim('['):
		return fmt.Errorf("items: want an array, got %v", t)
	}
	for dec.More() {
		start := dec.InputOffset()
		obj, h, err := decodeItem(dec, keep)
		if err != nil {
			return err
		}
		l.bytes += dec.InputOffset() - start
		l.list.Items = append(l.list.Items, obj)
		l.held = append(l.held, h)
		if l.bytes >= budget && int64(len(l.list.Items)) < limit {
			l.cut = true
			return nil
		}
	}
	return expectDelim(dec, ']')
}

// listedMeta is what the engine keeps of a listed object's metadata.
type listedMeta struct {
	Namespace       string    `json:"namespace"`
	Name            string    `json:"name"`
	UID             types.UID `json:"uid"`
	ResourceVersion string    `json:"resourceVersion"`
	// CreationTimestamp tells an object left from an earlier CRD of the
	// same name (svm retire's count): 24 bytes an object, held as long as
	// the rest of its metadata.
	CreationTimestamp metav1.Time `json:"creationTimestamp"`
}

// entryAPIVersion is all a list decodes of a managedFields entry when it
// keeps no entries: the rest is skipped unread.
type entryAPIVersion struct {
	APIVersion string `json:"apiVersion"`
}

// decodeItem decodes the next item of a list, and what its managedFields
// held. Fields the engine does not keep (annotations, labels, and of
// managedFields all but each entry's apiVersion unless keep is set) are
// skipped without being decoded.
func decodeItem(dec *json.Decoder, keep func([]metav1.ManagedFieldsEntry) bool) (metav1.PartialObjectMetadata, held, error) {
	var meta listedMeta
	var entries []metav1.ManagedFieldsEntry
	var h held
	if keep == nil {
		var item struct {
			Metadata struct {
				listedMeta
				ManagedFields []entryAPIVersion `json:"managedFields"`
			} `json:"metadata"`
		}
		if err := dec.Decode(&item); err != nil {
			return metav1.PartialObjectMetadata{}, nil, err
		}
		meta = item.Metadata.listedMeta
		h = heldOf(item.Metadata.ManagedFields, func(e entryAPIVersion) string { return e.APIVersion })
	} else {
		var item struct {
			Metadata struct {
				listedMeta
				ManagedFields []metav1.ManagedFieldsEntry `json:"managedFields"`
			} `json:"metadata"`
		}
		if err := dec.Decode(&item); err != nil {
			return metav1.PartialObjectMetadata{}, nil, err
		}
		meta = item.Metadata.listedMeta
		h = heldOf(item.Metadata.ManagedFields, entryVersion)
		if keep(item.Metadata.ManagedFields) {
			entries = item.Metadata.ManagedFields
		}
	}
	return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: meta.Namespace, Name: meta.Name, UID: meta.UID, ResourceVersion: meta.ResourceVersion, ManagedFields: entries,
		CreationTimestamp: meta.CreationTimestamp,
	}}, h, nil
}

// skipValue reads the next value, however deep, and keeps nothing of it.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t != want {
		return fmt.Errorf("want %v, got %v", want, t)
	}
	return nil
}

// resourcePath is the path of gvr's objects, in namespace if set, or of
// the one named name.
func resourcePath(gvr schema.GroupVersionResource, namespace, name string) []string {
	path := []string{"apis", gvr.Group, gvr.Version}
	if gvr.Group == "" {
		path = []string{"api", gvr.Version}
	}
	if namespace != "" {
		path = append(path, "namespaces", namespace)
	}
	path = append(path, gvr.Resource)
	if name != "" {
		path = append(path, name)
	}
	return path
}

// chunkSizer chooses how many objects each list asks for: as many as fit
// Options.ChunkBytes at the bytes per object of the last chunk, at most
// Options.ChunkSize; the first list asks for ChunkSize. A list whose
// items reach the budget before its limit, because its objects are larger
// than the last chunk's, is cut (see run.list): what any list brings is
// bounded by the budget and one object, whatever the objects' sizes and
// order, and the sizer only keeps cuts rare.
type chunkSizer struct {
	most, budget int64
	// perObject is the bytes per object of the last chunk, 0 before one.
	perObject int64
}

func (s *chunkSizer) limit() int64 {
	if s.perObject <= 0 {
		return s.most
	}
	return min(s.most, max(1, s.budget/s.perObject))
}

// seen records a chunk's objects and bytes.
func (s *chunkSizer) seen(objects int, bytes int64) {
	if objects > 0 {
		s.perObject = max(1, bytes/int64(objects))
	}
}
