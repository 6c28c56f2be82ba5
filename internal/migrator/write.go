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
// object's metadata, of which svm reads the resourceVersion, which tells
// re-stored from already current, and, when how.entries asks, whether it
// still has managedFields entries (see readAnswer and check): the rest,
// annotations of up to 256 KiB among it, is discarded unheld, so writes
// in flight hold little whatever the objects' size.
func (r *run) patch(ctx context.Context, obj *metav1.PartialObjectMetadata, how patchAs) (writeAnswer, error) {
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
	if how.subresource != "" {
		path = append(path, how.subresource)
	}
	req := r.m.rest.Patch(types.MergePatchType).AbsPath(path...).
		Param("fieldManager", r.m.opts.FieldManager).Param("fieldValidation", metav1.FieldValidationIgnore).
		SetHeader("Accept", metadataJSON).Body(body)
	if how.dryRun {
		req = req.Param("dryRun", metav1.DryRunAll)
	}
	stream, err := req.Stream(ctx)
	if err != nil {
		return writeAnswer{}, err
	}
	defer stream.Close()
	a, err := readAnswer(stream, how.entries)
	if err != nil {
		return a, fmt.Errorf("read the answer: %w", err)
	}
	return a, nil
}

// patchAs says how patch writes.
type patchAs struct {
	// subresource is "" for the object itself, or "status" (see
	// writeThroughStatus).
	subresource string
	// dryRun stores nothing (see probe).
	dryRun bool
	// entries reads whether the answer has managedFields entries.
	entries bool
}
