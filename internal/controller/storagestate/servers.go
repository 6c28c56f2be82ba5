package storagestate

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/apiservers"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/trigger"
)

// serverDiscovery is what one API server's own discovery said.
type serverDiscovery struct {
	server string
	own    bool
	hashes map[schema.GroupResource]string
	// failed are the groups it did not answer for; err, when set, is why
	// it could not be read at all.
	failed map[string]bool
	err    error
}

// serverReads is what every API server's own discovery said at one
// discovery round, and how many API servers held live identity leases.
type serverReads struct {
	live  int
	reads []serverDiscovery
}

// lookAtServers reads every API server's own discovery, where no
// StorageVersion object says what they store the built-in resources in
// and more than one API server runs (or a StorageState still says that
// they disagreed: the round that sees them agree again must be decided
// the same way). Discovery through the kubeconfig's address is one
// server's view: during a rolling upgrade another may still write the
// old version, and a migration then would leave its writes behind while
// the StorageState says they are gone. It returns nil when it does not
// ask each server; the trigger then trusts discovery as before.
func (c *Controller) lookAtServers(ctx context.Context, snap *snapshot) *serverReads {
	if c.storageVersions != nil || c.Leases == nil || c.Servers == nil {
		return nil
	}
	ids, err := apiservers.Identities(ctx, c.Leases, c.Clock.Now())
	if err != nil {
		klog.FromContext(ctx).Error(err, "API servers not known from their identity leases; storage versions come from discovery alone")
		return nil
	}
	if len(ids) < 2 && !anyDisagree(snap.states) {
		return nil
	}
	return &serverReads{live: len(ids), reads: c.readServers(ids)}
}

// views is what each server said of gr.
func (s *serverReads) views(gr schema.GroupResource) []trigger.ServerView {
	views := make([]trigger.ServerView, 0, len(s.reads))
	for _, r := range s.reads {
		views = append(views, r.view(gr))
	}
	return views
}

// encoding is what the servers say together of the built-in resource gr,
// nil when svm does not ask each one or none serves gr.
func (s *serverReads) encoding(gr schema.GroupResource) *trigger.Encoding {
	if s == nil {
		return nil
	}
	return trigger.EncodingOfServers(s.live, s.views(gr))
}

// behind says which servers still report another storage version hash for
// the custom resource gr than its CRD's, storageHash; "" when none does or
// svm does not ask each one.
func (s *serverReads) behind(gr schema.GroupResource, storageHash string) string {
	if s == nil || storageHash == "" {
		return ""
	}
	return trigger.ServersBehind(storageHash, s.views(gr))
}

// readServers reads the discovery of every API server at its own address
// (apiservers.Endpoints), at once.
func (c *Controller) readServers(ids []apiservers.Identity) []serverDiscovery {
	names := map[string]string{}
	for _, id := range ids {
		if id.PeerAddress != "" {
			names["https://"+id.PeerAddress] = id.ID
		}
	}
	endpoints := apiservers.Endpoints(c.Endpoints, c.Servers.Host(), ids)
	reads := make([]serverDiscovery, len(endpoints))
	var wg sync.WaitGroup
	for i, endpoint := range endpoints {
		// An address given, or one a lease publishes, is one server's; the
		// kubeconfig's may be a load balancer's, unless one server runs.
		own := len(c.Endpoints) > 0 || endpoint != c.Servers.Host() || len(ids) == 1
		name := endpoint
		if id, ok := names[endpoint]; ok {
			name += " (" + id + ")"
		}
		wg.Go(func() { reads[i] = c.readServer(endpoint, name, own) })
	}
	wg.Wait()
	return reads
}

// readServer reads the discovery of the API server at endpoint.
func (c *Controller) readServer(endpoint, name string, own bool) serverDiscovery {
	r := serverDiscovery{server: name, own: own, hashes: map[schema.GroupResource]string{}, failed: map[string]bool{}}
	d, err := c.Servers.DiscoveryFor(endpoint)
	if err != nil {
		r.err = err
		return r
	}
	found, err := resources.Discover(d)
	if err != nil {
		r.err = err
		return r
	}
	for gv := range found.FailedGroups {
		r.failed[gv.Group] = true
	}
	for _, res := range found.Resources {
		r.hashes[res.GroupResource()] = res.StorageVersionHash
	}
	return r
}

// view is what r says of gr.
func (r serverDiscovery) view(gr schema.GroupResource) trigger.ServerView {
	v := trigger.ServerView{Server: r.server, Own: r.own, Hash: r.hashes[gr]}
	switch {
	case r.err != nil:
		v.Err = r.err.Error()
	case r.failed[gr.Group] && v.Hash == "":
		v.Err = "discovery failed for group " + gr.Group
	}
	return v
}

// anyDisagree reports whether a StorageState says that the API servers
// disagree.
func anyDisagree(states map[schema.GroupResource]*migrationv1alpha1.StorageState) bool {
	for _, s := range states {
		if s.Status.ServersDisagree != "" {
			return true
		}
	}
	return false
}
