package managedfields

import (
	"context"
	pathpkg "path"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/rest"
)

// documents is an openapi.Client that knows the paths of the
// group-versions a Mover needs and reads each one's OpenAPI v3 document
// straight from it, /openapi/v3/apis/GROUP/VERSION (/openapi/v3/api/v1
// for the core group): one request per document. openapi.NewClient's
// Paths first reads the index of every group-version's document, one
// more request at every read, and an index that grows with every CRD
// the cluster has. A group-version the API server does not serve
// answers 404, which loadSchema takes as the index's absence of it.
type documents struct {
	client rest.Interface
	gvs    []schema.GroupVersion
}

// Paths implements openapi.Client, without a request.
func (d documents) Paths() (map[string]openapi.GroupVersion, error) {
	out := make(map[string]openapi.GroupVersion, len(d.gvs))
	for _, gv := range d.gvs {
		p := apiPath(gv)
		out[p] = document{client: d.client, path: pathpkg.Join("/openapi/v3", p)}
	}
	return out, nil
}

// apiPath is gv's path under /openapi/v3, as the index names it.
func apiPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return pathpkg.Join("api", gv.Version)
	}
	return pathpkg.Join("apis", gv.Group, gv.Version)
}

// document is one group-version's OpenAPI v3 document.
type document struct {
	client rest.Interface
	path   string
}

// Schema implements openapi.GroupVersion.
func (d document) Schema(contentType string) ([]byte, error) {
	return d.SchemaWithContext(context.Background(), contentType)
}

// SchemaWithContext implements openapi.GroupVersionWithContext.
func (d document) SchemaWithContext(ctx context.Context, contentType string) ([]byte, error) {
	return d.client.Get().AbsPath(d.path).SetHeader("Accept", contentType).Do(ctx).Raw()
}

// ServerRelativeURL implements openapi.GroupVersion.
func (d document) ServerRelativeURL() string { return d.path }

// neededDocuments are the group-versions whose documents For may read for
// r: the version kept and those retired.
func neededDocuments(r Resource, rt Retarget) []schema.GroupVersion {
	gvs := []schema.GroupVersion{r.Kept.GroupVersion()}
	for _, v := range rt.Retired {
		if gv, err := schema.ParseGroupVersion(v); err == nil {
			gvs = append(gvs, gv)
		}
	}
	return gvs
}
