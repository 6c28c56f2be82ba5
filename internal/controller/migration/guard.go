package migration

import (
	"context"
	"fmt"

	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiserverinternalv1alpha1client "k8s.io/client-go/kubernetes/typed/apiserverinternal/v1alpha1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/fingerprint"
	"github.com/svm-project/svm/internal/operation"
	"github.com/svm-project/svm/internal/resources"
)

// Fingerprint is what decides a resource's storage version, as read at one
// moment (internal/fingerprint): if it differs at the end of a migration
// from its start, the storage version may have changed while objects were
// being rewritten, and the migration proves nothing.
type Fingerprint = fingerprint.Fingerprint

// StorageGuard reads fingerprints, and what the trigger recorded of the
// current storage version.
type StorageGuard interface {
	// Read reads gr's storage fingerprint before a run, with the CRD it
	// comes from.
	Read(ctx context.Context, gr schema.GroupResource) (Reading, error)
	// ReadAfter reads it again once the run has rewritten every object.
	// What a run needs of the StorageState was read before it, and an
	// implementation may leave it out.
	ReadAfter(ctx context.Context, gr schema.GroupResource) (Reading, error)
	// StoredSince is the revision since which every API server stores gr
	// in its current version, as the resource's StorageState records it
	// for the storage of r, read just before (from the StorageState r
	// was read with, if it was); nil when it records none for it, or
	// cannot be read.
	StoredSince(ctx context.Context, gr schema.GroupResource, r Reading) *operation.StoredSince
}

// Reading is what the guard read of a resource at one moment.
type Reading struct {
	Fingerprint
	// CRD is the resource's CRD as read, nil when it has none: what the
	// executor marks StorageMigrating and moves managedFields by, and
	// whose resourceVersion the mark is conditional on, without reading
	// it again.
	CRD *apiextensionsv1.CustomResourceDefinition
	// state is the resource's StorageState, read with the CRD (nil when
	// there is none); stateRead tells whether it was read.
	state     *migrationv1alpha1.StorageState
	stateRead bool
}

// APIStorageGuard reads the fingerprint from the API server: the CRD for a
// custom resource, the StorageVersion object (internal.apiserver.k8s.io)
// where it is served. It lists by name, which the controller's role
// already allows for every resource, so it needs no other permission.
type APIStorageGuard struct {
	// Reader should read from the API server, not a cache: a cache that
	// lags would hide the very change the guard looks for.
	Reader client.Reader
	// StorageVersions reads StorageVersion objects, from the API server
	// too. It is a typed client, not Reader: where the API is not served
	// (its feature gate is off by default), Reader's RESTMapper would
	// answer every read by fetching discovery anew and rebuilding its
	// mapping of every resource, twice per migration. nil reads none.
	StorageVersions apiserverinternalv1alpha1client.StorageVersionsGetter
	// Epochs is what svm has seen of each CRD's generations
	// (internal/fingerprint), shared with the trigger, which reads the
	// CRDs a second after each change: a spec change that leaves the
	// storage version alone does not make a migration across it start
	// over. nil knows only each read.
	Epochs *fingerprint.Epochs
}

// Read implements StorageGuard. For a custom resource, it first teaches
// Epochs the fingerprint the resource's StorageState records, so that a
// guard that reads before the trigger's first round after a restart goes
// on from the epoch svm recorded; the state read is kept for StoredSince.
func (g APIStorageGuard) Read(ctx context.Context, gr schema.GroupResource) (Reading, error) {
	return g.read(ctx, gr, true)
}

// ReadAfter implements StorageGuard: Read without the StorageState. Read,
// before the run, taught Epochs what it records: one request fewer per
// run.
func (g APIStorageGuard) ReadAfter(ctx context.Context, gr schema.GroupResource) (Reading, error) {
	return g.read(ctx, gr, false)
}

func (g APIStorageGuard) read(ctx context.Context, gr schema.GroupResource, withState bool) (Reading, error) {
	var r Reading
	if gr.Group != "" {
		var crds apiextensionsv1.CustomResourceDefinitionList
		if err := g.Reader.List(ctx, &crds, client.MatchingFields{"metadata.name": gr.Resource + "." + gr.Group}); err != nil {
			return Reading{}, fmt.Errorf("read the CRD of %s: %w", gr, err)
		}
		if len(crds.Items) > 0 {
			r.CRD = &crds.Items[0]
		}
		if r.CRD != nil && withState {
			r.state, r.stateRead = g.state(ctx, gr), true
			if r.state != nil && g.Epochs != nil {
				g.Epochs.Learn(r.state.Status.StorageFingerprint)
			}
		}
	}
	sv, err := g.storageVersion(ctx, gr)
	if err != nil {
		return Reading{}, err
	}
	r.Fingerprint = g.Epochs.Of(r.CRD, sv)
	return r, nil
}

// storageVersion reads gr's StorageVersion object, nil when there is none
// or the API is not served (discovery alone then).
func (g APIStorageGuard) storageVersion(ctx context.Context, gr schema.GroupResource) (*apiserverinternalv1alpha1.StorageVersion, error) {
	if g.StorageVersions == nil {
		return nil, nil
	}
	name := resources.StorageVersionName(gr)
	svs, err := g.StorageVersions.StorageVersions().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil // the StorageVersion API is not served
	case err != nil:
		return nil, fmt.Errorf("read the StorageVersion of %s: %w", gr, err)
	}
	for i := range svs.Items {
		if svs.Items[i].Name == name {
			return &svs.Items[i], nil
		}
	}
	return nil, nil
}

// state reads gr's StorageState, nil when there is none or it cannot be
// read (logged).
func (g APIStorageGuard) state(ctx context.Context, gr schema.GroupResource) *migrationv1alpha1.StorageState {
	var states migrationv1alpha1.StorageStateList
	name := migrationv1alpha1.StorageStateName(migrationv1alpha1.GroupResource{Group: gr.Group, Resource: gr.Resource})
	if err := g.Reader.List(ctx, &states, client.MatchingFields{"metadata.name": name}); err != nil {
		klog.FromContext(ctx).Error(err, "Read the StorageState; what it records goes unused (every object is written)", "resource", gr)
		return nil
	}
	if len(states.Items) == 0 {
		return nil
	}
	return &states.Items[0]
}

// StoredSince implements StorageGuard: it reads the revision the trigger
// recorded on gr's StorageState (trigger.Decision.RecordRevision), which
// holds only while the storage it was recorded for is the same as r's. A
// state that cannot be read leaves every object to be written.
func (g APIStorageGuard) StoredSince(ctx context.Context, gr schema.GroupResource, r Reading) *operation.StoredSince {
	st := r.state
	if !r.stateRead {
		st = g.state(ctx, gr)
	}
	if st == nil {
		return nil
	}
	return storedSince(&st.Status, r.Fingerprint)
}

// storedSince is the revision st records, if it holds for fp: recorded
// for the same storage (fingerprint.SameStorage), and while every API
// server stores the current hash. Read without a fingerprint of its own
// (a state written before svm recorded one), it holds for nothing.
func storedSince(st *migrationv1alpha1.StorageStateStatus, fp Fingerprint) *operation.StoredSince {
	if st.CurrentStorageVersionRevision == "" || st.CurrentStorageVersionHash == migrationv1alpha1.UnknownStorageVersionHash ||
		st.StorageFingerprint == "" || !fingerprint.SameStorage(st.StorageFingerprint, fp.Value) {
		return nil
	}
	return &operation.StoredSince{Hash: st.CurrentStorageVersionHash, Revision: st.CurrentStorageVersionRevision}
}
