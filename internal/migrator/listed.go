package migrator

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// maxChunkBytes bounds the JSON a chunk's list may bring, once the size of
// the resource's objects is known from the chunk before: the next list asks
// for as many objects as fit, by the largest object seen, so that a
// resource of large objects (ConfigMaps and Secrets of a megabyte) is
// listed in smaller chunks rather than held 500 at a time.
const maxChunkBytes = 16 << 20

// chunk is one list's objects: each one's metadata, for the decisions, and
// its JSON as the API server served it, to be written back by an Update.
type chunk struct {
	meta   metav1.ListMeta
	items  []metav1.PartialObjectMetadata
	bodies [][]byte
	// largest is the size of the largest object's JSON.
	largest int
}

// listedJSON is a list's JSON with each item left as it came.
type listedJSON struct {
	Metadata metav1.ListMeta   `json:"metadata"`
	Items    []json.RawMessage `json:"items"`
}

// itemMeta is what the engine decodes of an object: its type, for an
// Update body that lacks it, and its metadata.
type itemMeta struct {
	Kind     string            `json:"kind"`
	Metadata metav1.ObjectMeta `json:"metadata"`
}

// collectionPath is the path of gvr's objects, in namespace when given.
func collectionPath(gvr schema.GroupVersionResource, namespace string) string {
	p := "/apis/" + gvr.Group + "/" + gvr.Version
	if gvr.Group == "" {
		p = "/api/" + gvr.Version
	}
	if namespace != "" {
		p += "/namespaces/" + namespace
	}
	return p + "/" + gvr.Resource
}

// listChunk lists up to limit whole objects from token, as JSON: the one
// encoding every resource serves, and the one an Update accepts back.
func (r *run) listChunk(ctx context.Context, token string, limit int64) (*chunk, error) {
	body, err := answer(r.m.raw.Get().AbsPath(collectionPath(r.req.Resource, "")).
		Param("limit", strconv.FormatInt(limit, 10)).Param("continue", token).
		SetHeader("Accept", "application/json").Do(ctx))
	if err != nil {
		return nil, err
	}
	var list listedJSON
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("decode the list of %s: %w", r.req.Resource.Resource, err)
	}
	c := &chunk{meta: list.Metadata, items: make([]metav1.PartialObjectMetadata, len(list.Items)), bodies: make([][]byte, len(list.Items))}
	for i, item := range list.Items {
		var m itemMeta
		if err := json.Unmarshal(item, &m); err != nil {
			return nil, fmt.Errorf("decode an object of %s: %w", r.req.Resource.Resource, err)
		}
		c.items[i].ObjectMeta = m.Metadata
		c.bodies[i] = r.withType(item, m.Kind)
		c.largest = max(c.largest, len(item))
	}
	return c, nil
}

// withType returns the object's JSON with its kind and apiVersion. The
// items of a built-in resource's list carry neither (their list says
// them once); an Update's body must.
func (r *run) withType(item []byte, kind string) []byte {
	if kind != "" || len(item) < 2 {
		return item
	}
	head := fmt.Sprintf(`{"kind":%q,"apiVersion":%q,`, r.kind, r.req.Resource.GroupVersion().String())
	if item[1] == '}' {
		head = head[:len(head)-1]
	}
	return append([]byte(head), item[1:]...)
}

// nextLimit is how many objects the list after c asks for: the chunk size,
// or fewer when as many objects as large as c's largest would bring more
// than maxChunkBytes.
func (r *run) nextLimit(c *chunk) int64 {
	if c.largest == 0 {
		return r.m.opts.ChunkSize
	}
	return max(1, min(r.m.opts.ChunkSize, int64(maxChunkBytes/c.largest)))
}

// update writes obj back as listed: an Update whose body is the object's
// JSON as the API server served it, resourceVersion included, which the
// server checks before anything else (409 Conflict when the object was
// written since). The answer is asked for as metadata: its resourceVersion
// is all the engine reads of it.
func (r *run) update(ctx context.Context, obj *metav1.PartialObjectMetadata, body []byte) (*metav1.PartialObjectMetadata, error) {
	ns := ""
	if r.namespaced {
		ns = obj.Namespace
	}
	// Field validation judges the fields a write sets, and this one sets
	// them all to what the server served. Left at its default (Warn), it
	// would only make the server decode every object strictly, and report
	// as svm's any duplicate or unknown field it finds in the stored one.
	got, err := answer(r.m.raw.Put().AbsPath(collectionPath(r.req.Resource, ns), obj.Name).
		Param("fieldManager", r.m.opts.FieldManager).Param("fieldValidation", metav1.FieldValidationIgnore).
		SetHeader("Content-Type", "application/json").
		SetHeader("Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json").
		Body(body).Do(ctx))
	if err != nil {
		return nil, err
	}
	var written metav1.PartialObjectMetadata
	if err := json.Unmarshal(got, &written); err != nil {
		return nil, fmt.Errorf("decode the answer for %s: %w", objectName(obj), err)
	}
	return &written, nil
}

// answer is a request's body, or its error as the API server's Status
// says it (its message, its reason, an expired list's continue token).
func answer(res rest.Result) ([]byte, error) {
	if err := res.Error(); err != nil {
		return nil, err
	}
	return res.Raw()
}
