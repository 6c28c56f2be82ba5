package migration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/internal/trigger"
)

// Fingerprint is what decides a resource's storage version, as read at one
// moment: if it differs at the end of a migration from its start, the
// storage version may have changed while objects were being rewritten,
// and the migration proves nothing.
type Fingerprint struct {
	// Value changes whenever the storage version may have: the CRD's
	// generation and storage version, the StorageVersion object's
	// resourceVersion. Empty when neither exists (discovery alone).
	Value string
	// Disagreement, when not empty, says that API servers encode the
	// resource in different versions (a rolling upgrade under way), so
	// that whatever a migration rewrites now may be written back in an
	// old version by another server.
	Disagreement string
}

// StorageGuard reads fingerprints, and what the trigger recorded of the
// current storage version.
type StorageGuard interface {
	Fingerprint(ctx context.Context, gr schema.GroupResource) (Fingerprint, error)
	// StoredSince is the revision since which every API server stores gr
	// in its current version, as the resource's StorageState records it;
	// nil when it records none, or cannot be read.
	StoredSince(ctx context.Context, gr schema.GroupResource) *migrator.StoredSince
}

// APIStorageGuard reads the fingerprint from the API server: the CRD for a
// custom resource, the StorageVersion object (internal.apiserver.k8s.io)
// where it is served. It lists by name, which the controller's role
// already allows for every resource, so it needs no other permission.
type APIStorageGuard struct {
	// Reader should read from the API server, not a cache: a cache that
	// lags would hide the very change the guard looks for.
	Reader client.Reader
}

// Fingerprint implements StorageGuard.
func (g APIStorageGuard) Fingerprint(ctx context.Context, gr schema.GroupResource) (Fingerprint, error) {
	var parts []string
	var fp Fingerprint
	if gr.Group != "" {
		var crds apiextensionsv1.CustomResourceDefinitionList
		if err := g.Reader.List(ctx, &crds, client.MatchingFields{"metadata.name": gr.Resource + "." + gr.Group}); err != nil {
			return fp, fmt.Errorf("read the CRD of %s: %w", gr, err)
		}
		for _, crd := range crds.Items {
			storage := ""
			for _, v := range crd.Spec.Versions {
				if v.Storage {
					storage = v.Name
				}
			}
			parts = append(parts, "crd="+strconv.FormatInt(crd.Generation, 10)+"/"+storage)
		}
	}
	var svs apiserverinternalv1alpha1.StorageVersionList
	err := g.Reader.List(ctx, &svs, client.MatchingFields{"metadata.name": trigger.StorageVersionName(gr)})
	switch {
	case meta.IsNoMatchError(err):
		// The StorageVersion API is not served: discovery alone.
	case err != nil:
		return fp, fmt.Errorf("read the StorageVersion of %s: %w", gr, err)
	}
	for _, sv := range svs.Items {
		parts = append(parts, "storageversion="+sv.ResourceVersion)
		fp.Disagreement = disagreement(&sv)
	}
	fp.Value = strings.Join(parts, ",")
	return fp, nil
}

// StoredSince implements StorageGuard: it reads the revision the trigger
// recorded on gr's StorageState (trigger.Decision.RecordRevision). A state
// that cannot be read leaves every object to be written.
func (g APIStorageGuard) StoredSince(ctx context.Context, gr schema.GroupResource) *migrator.StoredSince {
	var states migrationv1alpha1.StorageStateList
	name := migrationv1alpha1.StorageStateName(migrationv1alpha1.GroupResource{Group: gr.Group, Resource: gr.Resource})
	if err := g.Reader.List(ctx, &states, client.MatchingFields{"metadata.name": name}); err != nil {
		klog.FromContext(ctx).Error(err, "Read the StorageState; every object will be written", "resource", gr)
		return nil
	}
	for _, s := range states.Items {
		if st := s.Status; st.CurrentStorageVersionRevision != "" && st.CurrentStorageVersionHash != migrationv1alpha1.UnknownStorageVersionHash {
			return &migrator.StoredSince{Hash: st.CurrentStorageVersionHash, Revision: st.CurrentStorageVersionRevision}
		}
	}
	return nil
}

// disagreement describes the API servers' disagreement on the encoding
// version in a StorageVersion object, "" when they agree (or none has
// reported).
func disagreement(sv *apiserverinternalv1alpha1.StorageVersion) string {
	if sv.Status.CommonEncodingVersion != nil || len(sv.Status.StorageVersions) == 0 {
		return ""
	}
	var each []string
	for _, s := range sv.Status.StorageVersions {
		each = append(each, s.EncodingVersion+" ("+s.APIServerID+")")
	}
	slices.Sort(each)
	return "API servers encode " + sv.Name + " in different versions: " + strings.Join(each, ", ")
}

// sameStorage reports whether the storage version cannot have changed
// between a migration's start, whose fingerprint was saved, and now. A CRD
// deleted meanwhile took every object of its resource with it: nothing can
// be left in an old version, so only the rest of the fingerprint counts.
func sameStorage(saved string, now Fingerprint) bool {
	if saved == now.Value {
		return true
	}
	withoutCRD := func(v string) string {
		return strings.Join(slices.DeleteFunc(strings.Split(v, ","), func(p string) bool { return strings.HasPrefix(p, "crd=") }), ",")
	}
	return strings.Contains(saved, "crd=") && !strings.Contains(now.Value, "crd=") && withoutCRD(saved) == now.Value
}
