package resources

import (
	"context"
	"sync"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// discoveryWorkers is how many group versions' documents a discovery
// reads at once: enough to keep up with a discovery client's rate limit
// (svm's: 50 a second) at a few milliseconds an answer.
const discoveryWorkers = 8

// boundedDiscovery reads every group version's discovery document with at
// most discoveryWorkers requests in flight, for client-go's
// ServerPreferredResources to pick the preferred versions from. client-go
// alone starts a goroutine for every group version at once: with a
// thousand CRDs of two versions each, two thousand goroutines that wait
// for the client's rate limit for some 40 seconds, each with its stack and
// its request (12 MB of svm controller's memory, more than its heap kept).
type boundedDiscovery struct {
	discovery.DiscoveryInterfaceWithContext
}

var _ discovery.AggregatedDiscoveryInterfaceWithContext = boundedDiscovery{}

// GroupsAndMaybeResourcesWithContext returns the groups and every group
// version's resources; a group version that could not be read is in the
// third value, as client-go reports it.
func (b boundedDiscovery) GroupsAndMaybeResourcesWithContext(ctx context.Context) (*metav1.APIGroupList, map[schema.GroupVersion]*metav1.APIResourceList, map[schema.GroupVersion]error, error) {
	groups, err := b.ServerGroupsWithContext(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	lists := map[schema.GroupVersion]*metav1.APIResourceList{}
	failed := map[schema.GroupVersion]error{}
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(discoveryWorkers)
	for _, group := range groups.Groups {
		for _, version := range group.Versions {
			gv := schema.GroupVersion{Group: group.Name, Version: version.Version}
			g.Go(func() error {
				list, err := b.ServerResourcesForGroupVersionWithContext(ctx, gv.String())
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed[gv] = err
				}
				if list != nil {
					lists[gv] = list
				}
				return nil
			})
		}
	}
	_ = g.Wait() // every error is recorded in failed
	return groups, lists, failed, nil
}
