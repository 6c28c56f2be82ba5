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

// lookAtServers reads every API server's own discovery, where no
// StorageVersion object says what they store the built-in resources in
// and more than one API server runs (or a StorageState still says that
// they disagreed: the round that sees them agree again must be decided
// the same way), and puts together what they say of each built-in
// resource. Discovery through the kubeconfig's address is one server's
// view: during a rolling upgrade another may still write the old
// version, and a migration then would leave its writes behind while the
// StorageState says they are gone. It returns nil when it does not ask
// each server; the trigger then trusts discovery as before.
func (c *Controller) lookAtServers(ctx context.Context, observed map[schema.GroupResource]*string, snap *snapshot) map[schema.GroupResource]*trigger.Encoding {
	if c.storageVersions != nil || c.Leases == nil || c.Servers == nil {
		return nil
	}
	log := klog.FromContext(ctx)
	ids, err := apiservers.Identities(ctx, c.Leases, c.Clock.Now())
	if err != nil {
		log.Error(err, "API servers not known from their identity leases; storage versions of built-in resources come from discovery alone")
		return nil
	}
	if len(ids) < 2 && !anyDisagree(snap.states) {
		return nil
	}
	reads := c.readServers(ids)
	out := map[schema.GroupResource]*trigger.Encoding{}
	for _, gr := range builtIns(observed, reads, snap) {
		views := make([]trigger.ServerView, 0, len(reads))
		for _, r := range reads {
			views = append(views, r.view(gr))
		}
		if e := trigger.EncodingOfServers(len(ids), views); e != nil {
			out[gr] = e
		}
	}
	return out
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

// builtIns are the resources discovered through any address, with a
// storage version hash, that no CRD serves: a custom resource's storage
// version is its CRD's, which every server reads from etcd.
func builtIns(observed map[schema.GroupResource]*string, reads []serverDiscovery, snap *snapshot) []schema.GroupResource {
	var out []schema.GroupResource
	seen := map[schema.GroupResource]bool{}
	add := func(gr schema.GroupResource) {
		if _, crd := snap.crds[gr]; !crd && !seen[gr] {
			seen[gr] = true
			out = append(out, gr)
		}
	}
	for gr := range observed {
		add(gr)
	}
	for _, r := range reads {
		for gr, hash := range r.hashes {
			if hash != "" {
				add(gr)
			}
		}
	}
	return out
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
