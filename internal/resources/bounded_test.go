package resources

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// countingDiscovery serves groups of two versions (v2 preferred) and
// counts the reads of group versions in flight at once.
type countingDiscovery struct {
	discovery.DiscoveryInterface // nil: only the methods below are called
	groups                       int
	broken                       string // a group version whose read fails

	mu             sync.Mutex
	inFlight, most int
	reads          int
}

func groupName(i int) string { return fmt.Sprintf("g%03d.example.com", i) }

func (d *countingDiscovery) ServerGroups() (*metav1.APIGroupList, error) {
	list := &metav1.APIGroupList{}
	for i := range d.groups {
		v1 := metav1.GroupVersionForDiscovery{GroupVersion: groupName(i) + "/v1", Version: "v1"}
		v2 := metav1.GroupVersionForDiscovery{GroupVersion: groupName(i) + "/v2", Version: "v2"}
		list.Groups = append(list.Groups, metav1.APIGroup{Name: groupName(i), Versions: []metav1.GroupVersionForDiscovery{v2, v1}, PreferredVersion: v2})
	}
	return list, nil
}

func (d *countingDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	d.inFlight++
	d.reads++
	d.most = max(d.most, d.inFlight)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.inFlight--
		d.mu.Unlock()
	}()
	time.Sleep(2 * time.Millisecond) // long enough for the reads to overlap
	if gv == d.broken {
		return nil, errors.New("service unavailable")
	}
	parsed, err := schema.ParseGroupVersion(gv)
	if err != nil {
		return nil, err
	}
	verbs := metav1.Verbs{"get", "list", "patch", "update", "watch"}
	list := &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{
		{Name: "things", Kind: "Thing", Verbs: verbs, StorageVersionHash: parsed.Group + "-things"},
	}}
	if parsed.Version == "v1" {
		// Served in the older version only: still found, there.
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: "olds", Kind: "Old", Verbs: verbs, StorageVersionHash: parsed.Group + "-olds"})
	}
	return list, nil
}

func TestDiscoverReadsAtMostAFewGroupVersionsAtOnce(t *testing.T) {
	d := &countingDiscovery{groups: 100, broken: groupName(7) + "/v1"}
	found, err := Discover(d)
	if err != nil {
		t.Fatal(err)
	}
	if d.reads != 200 {
		t.Errorf("%d group versions read, want every one of 200", d.reads)
	}
	if d.most > discoveryWorkers || d.most < 2 {
		t.Errorf("at most %d reads at once, want 2 to %d", d.most, discoveryWorkers)
	}
	if len(found.FailedGroups) != 1 || found.FailedGroups[schema.GroupVersion{Group: groupName(7), Version: "v1"}] == nil {
		t.Errorf("failed groups %v, want %s/v1 alone", found.FailedGroups, groupName(7))
	}
	byName := map[schema.GroupResource]Resource{}
	for _, r := range found.Resources {
		byName[r.GroupResource()] = r
	}
	// Every group's things in the preferred v2, its olds in v1 where v1
	// was read: 100 + 99 resources.
	if len(found.Resources) != 199 {
		t.Errorf("%d resources found, want 199", len(found.Resources))
	}
	if r := byName[schema.GroupResource{Group: groupName(3), Resource: "things"}]; r.Version != "v2" || r.StorageVersionHash != groupName(3)+"-things" {
		t.Errorf("things of %s found as %+v, want v2 (preferred) with its hash", groupName(3), r)
	}
	if r := byName[schema.GroupResource{Group: groupName(3), Resource: "olds"}]; r.Version != "v1" {
		t.Errorf("olds of %s found as %+v, want v1, the only version serving it", groupName(3), r)
	}
	if _, ok := byName[schema.GroupResource{Group: groupName(7), Resource: "olds"}]; ok {
		t.Errorf("olds of %s found although its only version failed", groupName(7))
	}
}
