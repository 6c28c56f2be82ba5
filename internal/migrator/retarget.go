package migrator

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/openapi"

	"github.com/svm-project/svm/internal/admission"
	"github.com/svm-project/svm/internal/managedfields"
)

// ManagedFields asks a migration to move the managedFields entries that
// name a retired version to the target version, each manager keeping its
// fields where the target version has them (see internal/managedfields:
// the Mover says where, and its rule is the one svm has). The object's
// patch then carries its whole new managedFields list beside the uid and
// resourceVersion preconditions; an entry whose fields cannot be placed
// is left as it is, and counted by why (Progress.ManagedFieldsLeft).
//
// Unlike re-encoding, which any write does, only svm's write fixes an
// object's managedFields: an object written by another client since the
// migration started is not skipped when its entries still name a retired
// version. A conflict is answered by reading the object again and moving
// what it holds then, up to maxRetargetAttempts times.
type ManagedFields struct {
	*managedfields.Mover
	// Only limits the writes to the objects whose entries name a retired
	// version; the others are counted as Progress.NothingToRewrite, and so
	// are those none of whose entries could be moved. Use it when their
	// bytes need no rewrite. Off, every object is written, as without
	// ManagedFields.
	Only bool
}

// LeftEntry is a managedFields entry a migration left naming a retired
// version: on which object, whose it is, and why; never the object's
// contents.
type LeftEntry struct {
	Namespace, Name string
	// Manager, Operation, Subresource and APIVersion are the entry's.
	Manager, Operation, Subresource, APIVersion string
	// Reason is one word (managedfields.Reason): NotInVersion (the
	// version kept has no such field), NotServed (the API server cannot
	// convert from the version), NotConverted (the conversion does not
	// carry the fields one to one), Refused (the API server refused the
	// dry run that converts them, or kept them as they were when it
	// stored the write that moves them), Unplaced (no change to the object
	// shows where a field is), or Denied (an admission webhook or policy
	// refused the write that moves them). Message says which field, or
	// what the API server answered.
	Reason, Message string
}

// leftEntry is the entry l left on o.
func leftEntry(o *managedfields.Object, l managedfields.Left) LeftEntry {
	return LeftEntry{
		Namespace: o.Namespace, Name: o.Name, Manager: l.Manager, Operation: string(l.Operation), Subresource: l.Subresource,
		APIVersion: l.APIVersion, Reason: string(l.Reason), Message: l.Message,
	}
}

// maxRetargetAttempts bounds the writes of one object's managedFields that
// may meet a conflict: an object others keep changing is recorded as
// failed rather than retried forever.
const maxRetargetAttempts = 5

// OpenAPI reads the API server's OpenAPI v3 documents, which a
// managedfields.Mover reads the versions' schemas from.
func (m *Migrator) OpenAPI() openapi.Client { return m.discovery.OpenAPIV3() }

// FieldManager is the field manager the Migrator's requests name.
func (m *Migrator) FieldManager() string { return m.opts.FieldManager }

// FieldsMover is how a migration of r.Kept moves the managedFields entries
// that name r.Retired: managedfields.For, the one rule svm has, asking
// with m's OpenAPI client and field manager; objects reads the objects and
// sends the dry runs through which the API server converts with a CRD's
// webhook. nil when no version is left to move entries off.
func (m *Migrator) FieldsMover(ctx context.Context, objects dynamic.Interface, r managedfields.Resource) (*ManagedFields, error) {
	mover, ok, err := managedfields.For(ctx, r, managedfields.Clients{Dynamic: objects, OpenAPI: m.OpenAPI(), FieldManager: m.FieldManager()})
	if err != nil || !ok {
		return nil, err
	}
	return &ManagedFields{Mover: mover}, nil
}

// retarget moves the managedFields of an object whose entries name a
// retired version (Request.ManagedFields). A conflict means another
// client wrote the object since it was read, which does not fix its
// managedFields: the object is read again and its entries as they are then
// moved. done is false when none of its entries could be moved and the
// object is to be rewritten as any other; the error is set only when the
// whole migration must stop.
func (r *run) retarget(ctx context.Context, obj *metav1.PartialObjectMetadata) (done bool, err error) {
	mf := r.req.ManagedFields
	cur := obj
	fresh := false // cur was read just now, not listed
	for range maxRetargetAttempts {
		if fresh && !mf.Mapper.ReadsObjects() {
			if cur, err = r.readMetadata(ctx, obj); err != nil {
				return true, r.settle(ctx, obj, err)
			}
		}
		o, err := mf.Mapper.Read(ctx, r.retry, cur)
		if err != nil {
			return true, r.settle(ctx, obj, err)
		}
		fresh = fresh || mf.Mapper.ReadsObjects()
		if fresh && !mf.Names(o.Entries) {
			// Another client's write has already moved them (or the
			// object was deleted and created again without them).
			r.counters.writtenSinceStart.Add(1)
			r.observer.ObjectSkipped(r.gr, SkipWrittenSinceStart, nil)
			return true, nil
		}
		res, err := mf.Move(ctx, r.retry, o)
		moved := false
		if err == nil && res.Changed() {
			var stop stopping
			if moved, err = r.moveEntries(ctx, o, res); errors.As(err, &stop) {
				return true, stop.error
			}
		}
		switch {
		case err == nil && res.Changed() && !moved:
			// The API server stored the object but kept its entries as
			// they were (see moveAnswered): all of them stay.
			r.left(o, mf.Leave(o.Entries, managedfields.Refused, "the API server kept them as they were when it stored the write that moves them: its field manager failed (a conversion webhook down or too slow?)"))
			return true, nil
		case err == nil:
			r.left(o, res.Left)
			if res.Changed() || !mf.Only {
				return res.Changed(), nil
			}
			r.counters.nothingToRewrite.Add(1)
			return true, nil
		case apierrors.IsConflict(err):
			r.watchOthers()
			fresh = true
		case errors.Is(err, managedfields.ErrNoEntries) || !isRequestError(err):
			r.recordFailure(obj, err)
			return true, nil
		default:
			if denial, ok := admission.Denied(err); ok {
				// A write through the status subresource cannot move
				// the entries: the API server keeps the stored
				// managedFields for a subresource's write. With
				// Request.ThroughStatus it still re-stores the object,
				// whose entries naming a retired version are then left,
				// counted as Denied; otherwise the object fails.
				at := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
					Namespace: o.Namespace, Name: o.Name, UID: types.UID(o.UID), ResourceVersion: o.ResourceVersion,
				}}
				through, err := r.denied(ctx, at, heldOf(o.Entries, entryVersion), denial, err)
				if through {
					r.left(o, mf.Leave(o.Entries, managedfields.Denied, denial.Who()+" refused the write that moves them; the object was re-stored through its status subresource, which keeps them"))
				}
				return true, err
			}
			return true, r.settle(ctx, obj, err)
		}
	}
	r.recordFailure(obj, fmt.Errorf("written by others %d times in a row while svm moved its managedFields", maxRetargetAttempts))
	return true, nil
}

// moveEntries writes o's entries as res has them (patchEntries), once
// the probe allows it: the write makes the field manager convert the
// object for every entry still naming another version. moved is false
// when the API server stored other entries than those sent.
func (r *run) moveEntries(ctx context.Context, o *managedfields.Object, res managedfields.Result) (moved bool, err error) {
	at := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: o.Namespace, Name: o.Name, UID: types.UID(o.UID), ResourceVersion: o.ResourceVersion,
	}}
	if err := r.probe(ctx, at, heldOf(o.Entries, entryVersion)); err != nil {
		return false, stopping{err}
	}
	written, err := r.patchEntries(ctx, o, res)
	if err != nil {
		return false, err
	}
	switch moveAnswered(res.Entries, written.ManagedFields) {
	case movedLost:
		if err := r.lostAll(ctx, at, heldOf(res.Entries, entryVersion)); err != nil {
			return false, stopping{err}
		}
	case movedNot:
		r.countWritten(o.ResourceVersion, written.ResourceVersion)
		return false, nil
	}
	r.countWritten(o.ResourceVersion, written.ResourceVersion)
	r.counters.managedFieldsRewritten.Add(1)
	return true, nil
}

// stopping is an error that stops the whole migration, which retarget
// hands up as it is rather than classify as a request's.
type stopping struct{ error }

// patchEntries writes o's entries as res has them, guarded by the uid and
// resourceVersion they were read at, and returns the answer.
func (r *run) patchEntries(ctx context.Context, o *managedfields.Object, res managedfields.Result) (*metav1.PartialObjectMetadata, error) {
	patch, err := managedfields.Patch(o.UID, o.ResourceVersion, res.Entries)
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: r.m.opts.FieldManager, FieldValidation: metav1.FieldValidationIgnore}
	var written *metav1.PartialObjectMetadata
	err = r.retry(ctx, "patch", func(ctx context.Context) error {
		var err error
		written, err = r.metadataClient(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, patch, opts)
		return err
	})
	return written, err
}

// readMetadata reads obj's metadata again, listing its one name: svm's
// controller may list objects, not get them, and a list by name reveals no
// more.
func (r *run) readMetadata(ctx context.Context, obj *metav1.PartialObjectMetadata) (*metav1.PartialObjectMetadata, error) {
	var list *metav1.PartialObjectMetadataList
	err := r.retry(ctx, "get", func(ctx context.Context) error {
		var err error
		list, err = r.metadataClient(obj.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + obj.Name})
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, apierrors.NewNotFound(r.gr, obj.Name)
	}
	return &list.Items[0], nil
}

func (r *run) metadataClient(namespace string) metadata.ResourceInterface {
	if r.namespaced {
		return r.m.metadata.Resource(r.req.Resource).Namespace(namespace)
	}
	return r.m.metadata.Resource(r.req.Resource)
}

// left counts the entries left on o, and names the first ones.
func (r *run) left(o *managedfields.Object, left []managedfields.Left) {
	if len(left) == 0 {
		return
	}
	r.counters.leftMu.Lock()
	for _, l := range left {
		r.counters.left.Add(l.Reason, 1)
	}
	r.counters.leftMu.Unlock()
	r.failedMu.Lock()
	defer r.failedMu.Unlock()
	for _, l := range left {
		if len(r.res.LeftEntries) < r.m.opts.MaxFailedObjects {
			r.res.LeftEntries = append(r.res.LeftEntries, leftEntry(o, l))
		}
	}
}

// isRequestError reports whether err came from a request (the API server's
// answer, or trouble reaching it) rather than from svm's own reading of
// the object: the former is classified, the latter fails the object.
func isRequestError(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) || IsTransient(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
