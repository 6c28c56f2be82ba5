// Package resources finds the resources a server serves that svm can and
// should migrate: those that can be listed and patched, once per storage.
//
// Kubernetes derives a resource's discovery storageVersionHash from the
// group, version and kind it is stored as, so two resources that report the
// same hash are stored together (events and events.events.k8s.io, for
// example): migrating one rewrites both, and svm keeps one of them.
// Resources without a hash (those an aggregated API server serves without
// reporting one) are kept: svm cannot tell whether they share storage.
//
// Only the per-group-version discovery documents carry storageVersionHash;
// the aggregated discovery document that client-go prefers omits it. Give
// this package the process's discovery client (kubeclients.Set), which
// reads those.
package resources

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// Resource is a migratable resource in its preferred version.
type Resource struct {
	schema.GroupVersionResource
	Kind string
	// StorageVersionHash is discovery's hash of the storage version, or ""
	// when the server does not report one.
	StorageVersionHash string
}

// Discovery is the result of one discovery round.
type Discovery struct {
	// Resources are the migratable resources, one per storage, sorted.
	Resources []Resource
	// FailedGroups are group versions discovery could not read this round;
	// nothing may be concluded about their resources.
	FailedGroups map[schema.GroupVersion]error
}

// Discover reads discovery and returns the migratable resources. A partial
// failure is not an error: the groups that failed are reported.
func Discover(disc discovery.DiscoveryInterface) (*Discovery, error) {
	bounded := boundedDiscovery{discovery.ToDiscoveryInterfaceWithContext(disc)}
	lists, err := discovery.ServerPreferredResourcesWithContext(context.Background(), bounded)
	out := &Discovery{}
	if err != nil {
		var partial *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &partial) {
			return nil, fmt.Errorf("discover resources: %w", err)
		}
		out.FailedGroups = partial.Groups
	}
	out.Resources = Migratable(lists)
	return out, nil
}

// Migratable keeps the resources that can be listed and patched, without
// subresources, and one resource per storage.
func Migratable(lists []*metav1.APIResourceList) []Resource {
	var all []Resource
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "patch") {
				continue
			}
			all = append(all, Resource{GroupVersionResource: gv.WithResource(r.Name), Kind: r.Kind, StorageVersionHash: r.StorageVersionHash})
		}
	}
	// Sort so that, among resources sharing storage, the one in the group
	// that sorts first (the core group before any other) is kept.
	slices.SortFunc(all, func(a, b Resource) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Resource, b.Resource))
	})
	seen := map[string]bool{}
	out := all[:0]
	for _, r := range all {
		if r.StorageVersionHash != "" {
			if seen[r.StorageVersionHash] {
				continue
			}
			seen[r.StorageVersionHash] = true
		}
		out = append(out, r)
	}
	return out
}

// StorageVersionName is the name of the StorageVersion object the API
// servers keep for gr: "<group>.<resource>", with "core" for the core group
// (a name must be a DNS subdomain).
func StorageVersionName(gr schema.GroupResource) string {
	group := gr.Group
	if group == "" {
		group = "core"
	}
	return group + "." + gr.Resource
}

// StorageVersionHash is the hash discovery reports for objects stored as
// group/version/kind: the first 8 bytes of a SHA-256, base64 encoded. It lets
// svm name a CRD's storedVersions as hashes, and map hashes back to versions.
func StorageVersionHash(group, version, kind string) string {
	sum := sha256.Sum256([]byte(group + "/" + version + "/" + kind))
	return base64.StdEncoding.EncodeToString(sum[:8])
}
