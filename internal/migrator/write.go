package migrator

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// listChunk lists the metadata of up to Options.ChunkSize objects from
// token: all the engine needs to write an object back. A metadata list
// costs svm the same memory whatever the objects' size, and never brings
// it their content (a Secret's data).
func (r *run) listChunk(ctx context.Context, token string) (*metav1.PartialObjectMetadataList, error) {
	return r.m.metadata.Resource(r.req.Resource).List(ctx, metav1.ListOptions{Limit: r.m.opts.ChunkSize, Continue: token})
}

// patch writes obj back unchanged: a JSON merge patch that sets its uid
// and resourceVersion to the values listed. The answering API server
// applies it to the object it has stored, so a field svm never saw (one
// the server that answered the list did not know yet) is kept as stored;
// an Update of the object as listed would carry the list's view back and
// drop it (docs/design.md measures both). The resourceVersion is a
// precondition the server checks before anything else: 409 Conflict when
// the object was written since it was listed, and the uid keeps svm off an
// object deleted and created again under the same name. The answer is the
// object's metadata, whose resourceVersion tells re-stored from already
// current.
func (r *run) patch(ctx context.Context, obj *metav1.PartialObjectMetadata) (*metav1.PartialObjectMetadata, error) {
	body := fmt.Appendf(nil, `{"metadata":{"uid":%q,"resourceVersion":%q}}`, obj.UID, obj.ResourceVersion)
	// Field validation judges the fields a write sets; svm's sets none but
	// uid and resourceVersion. Left at its default (Warn), it would only
	// make the server decode every object strictly, and report as svm's
	// any duplicate or unknown field it finds in the stored one.
	opts := metav1.PatchOptions{FieldManager: r.m.opts.FieldManager, FieldValidation: metav1.FieldValidationIgnore}
	client := r.m.metadata.Resource(r.req.Resource)
	if r.namespaced {
		return client.Namespace(obj.Namespace).Patch(ctx, obj.Name, types.MergePatchType, body, opts)
	}
	return client.Patch(ctx, obj.Name, types.MergePatchType, body, opts)
}
