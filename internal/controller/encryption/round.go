package encryption

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/controller/round"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/rotation"
)

// applyRetry is how soon a decision whose writes failed (a conflict with
// the trigger's, say) is made again.
const applyRetry = 5 * time.Second

// round looks at the API servers and decides for every resource. It
// returns when to decide again for a retry or a write that must be
// redone, 0 for not before the next look.
func (c *Controller) round(ctx context.Context) time.Duration {
	a := c.lookAtServers(ctx)
	cl, err := c.readCluster(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Nothing is decided this round")
		return c.Interval
	}
	var next time.Duration
	for _, name := range c.Resources {
		next = shortest(next, c.decide(ctx, a, cl, name))
	}
	return next
}

// cluster is what a round decides from, read once for every resource.
type cluster struct {
	// resolved is what each name of Resources resolved to (resolveAll).
	resolved   map[string]resolution
	states     []migrationv1alpha1.StorageState
	migrations []migrationv1alpha1.StorageVersionMigration
}

// readCluster resolves Resources in discovery (resolveAll), and reads the
// StorageStates and the migrations, straight from the API server (see
// round.ReadObjects).
func (c *Controller) readCluster(ctx context.Context) (*cluster, error) {
	resolved, err := c.resolveAll()
	if err != nil {
		return nil, err
	}
	objs, err := round.ReadObjects(ctx, c.Reader)
	if err != nil {
		return nil, err
	}
	return &cluster{resolved: resolved, states: objs.States, migrations: objs.Migrations}, nil
}

// state is the StorageState of gr, nil when there is none.
func (cl *cluster) state(gr schema.GroupResource) *migrationv1alpha1.StorageState {
	i := slices.IndexFunc(cl.states, func(s migrationv1alpha1.StorageState) bool {
		return s.Spec.Resource.Group == gr.Group && s.Spec.Resource.Resource == gr.Resource
	})
	if i < 0 {
		return nil
	}
	return &cl.states[i]
}

// migrationsOf are every migration of gr, whoever made them.
func (cl *cluster) migrationsOf(gr schema.GroupResource) []migrationv1alpha1.StorageVersionMigration {
	var out []migrationv1alpha1.StorageVersionMigration
	for _, m := range cl.migrations {
		if m.Spec.Resource.Group == gr.Group && m.Spec.Resource.Resource == gr.Resource {
			out = append(out, m)
		}
	}
	return out
}

// decide decides for the resource the operator names name and carries
// the decision out. It returns when to decide again, 0 for not before
// the next look.
func (c *Controller) decide(ctx context.Context, a rotation.Agreement, cl *cluster, name string) time.Duration {
	log := klog.FromContext(ctx)
	r, err := cl.resolved[name].res, cl.resolved[name].err
	if err != nil {
		log.Error(err, "Resolve a resource to re-encrypt", "resource", name)
		return 0
	}
	gr := r.GroupResource()
	state := cl.state(gr)
	if state == nil {
		// The trigger creates every resource's StorageState at its first
		// round; this controller only adds to it, so that the state
		// always carries its storage version hashes.
		log.V(1).Info("No StorageState yet; deciding at the next look", "resource", gr)
		c.Metrics.ResourceRewritten(gr, false)
		return 0
	}
	ms := cl.migrationsOf(gr)
	d := rotation.Decide(rotation.Input{
		Now: c.Clock.Now(), Resource: resources.DisplayName(gr), Agreement: a, State: state, Migrations: ms,
		RetryBase: c.RetryBase, RetryMax: c.RetryMax,
	})
	next := d.RequeueAfter
	recorded, err := c.apply(ctx, r, state, ms, d)
	if err != nil {
		log.Error(err, "Apply re-encryption decision", "resource", gr)
		next = shortest(next, applyRetry)
	}
	c.Metrics.ResourceRewritten(gr, rotation.Current(a, recorded))
	return next
}

// shortest is the sooner of two delays, 0 standing for none.
func shortest(a, b time.Duration) time.Duration {
	if b > 0 && (a == 0 || b < a) {
		return b
	}
	return a
}
