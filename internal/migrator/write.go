package migrator

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// patch writes obj back unchanged: a JSON merge patch that sets its uid
// and resourceVersion to the values listed. The answering API server
// applies it to the object it has stored, so a field svm never saw (one
// the server that answered the list did not know yet) is kept as stored;
// an Update of the object as listed would carry the list's view back and
// drop it (docs/design.md measures both). The resourceVersion is a
// precondition the server checks before anything else: 409 Conflict when
// the object was written since it was listed, and the uid keeps svm off an
// object deleted and created again under the same name. The answer is the
// object's metadata, of which svm reads only the resourceVersion, which
// tells re-stored from already current (see readResourceVersion): the
// rest, annotations of up to 256 KiB among it, is discarded unread, so
// writes in flight hold little whatever the objects' size.
//
// subresource is "" for the object itself, or "status" (see
// writeThroughStatus).
func (r *run) patch(ctx context.Context, obj *metav1.PartialObjectMetadata, subresource string) (*metav1.PartialObjectMetadata, error) {
	body := fmt.Appendf(nil, `{"metadata":{"uid":%q,"resourceVersion":%q}}`, obj.UID, obj.ResourceVersion)
	namespace := ""
	if r.namespaced {
		namespace = obj.Namespace
	}
	// Field validation judges the fields a write sets; svm's sets none but
	// uid and resourceVersion. Left at its default (Warn), it would only
	// make the server decode every object strictly, and report as svm's
	// any duplicate or unknown field it finds in the stored one.
	path := resourcePath(r.req.Resource, namespace, obj.Name)
	if subresource != "" {
		path = append(path, subresource)
	}
	answer, err := r.m.rest.Patch(types.MergePatchType).AbsPath(path...).
		Param("fieldManager", r.m.opts.FieldManager).Param("fieldValidation", metav1.FieldValidationIgnore).
		SetHeader("Accept", metadataJSON).Body(body).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer answer.Close()
	rv, err := readResourceVersion(answer)
	if err != nil {
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}, nil
}
