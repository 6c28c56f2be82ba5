package migration

import (
	"cmp"
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/metrics"
)

// Choice holds who executes svm's migrations once it has been chosen.
type Choice struct {
	mu     sync.Mutex
	chosen *Executors
}

// Executors are the chosen executor and, where the in-tree API is served,
// the in-tree one.
type Executors struct {
	Name   intree.Executor
	Chosen Executor
	// Engine is svm's engine. With Overflow (--executor=auto), a
	// migration the in-tree migrator would not start at once, all of its
	// workers busy with svm's hand-overs, runs on it instead: the in-tree
	// migrator takes over a minute a resource however few its objects,
	// so one queued behind it waits longer than svm's engine takes.
	Engine   Executor
	Overflow bool
	// InTree follows migrations already handed to kube-controller-manager,
	// whatever is chosen now: starting svm's engine on them would rewrite
	// the resource beside the in-tree migrator. Nil when not served.
	InTree Executor
}

// For is the executor of m, with handedOver of svm's migrations running
// on the in-tree executor now, and whether it is the in-tree executor.
func (e *Executors) For(m *migrationv1alpha1.StorageVersionMigration, handedOver int) (ex Executor, inTree bool) {
	switch {
	case m.Status.InTreeMigration != "" && e.InTree != nil:
		return e.InTree, true
	case e.Name != intree.ExecutorInTree:
		return e.Chosen, false
	case e.Overflow && handedOver >= intree.RunnerWorkers && e.Engine != nil:
		return e.Engine, false
	}
	return e.Chosen, true
}

// Set records the choice.
func (c *Choice) Set(e *Executors) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.chosen = e
}

func (c *Choice) get() *Executors {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chosen
}

// Chooser decides, once it leads, who executes svm's migrations, and
// records it in Choice. It is a manager runnable that needs leadership: a
// probe creates an object, which only the leader may do. With
// --executor=auto it then follows what the choice rested on: when the
// kube-controller-manager lease appears, stops being renewed or changes
// hands (a control plane restarting, kube-controller-manager started after
// svm), it probes again and follows the new verdict. Migrations already
// handed over are followed to their end whatever is chosen after.
type Chooser struct {
	Asked  intree.Executor
	Served bool
	// BetaServed: only the in-tree API's v1beta1 is served (Kubernetes
	// 1.35 and 1.36), which svm does not hand migrations over to.
	BetaServed bool
	Prober     interface {
		Probe(context.Context) (intree.Verdict, error)
		Lease(context.Context) (intree.LeaseSeen, error)
	}
	Engine, InTree Executor
	Choice         *Choice
	Metrics        *metrics.Metrics
	// Recheck is how often auto reads the lease again. Default 30 seconds.
	Recheck time.Duration
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (c *Chooser) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable. A probe that cannot tell (the API
// server not answering) is tried again every few seconds.
func (c *Chooser) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("executor")
	follow := c.Asked == intree.ExecutorAuto && c.Served
	var seen intree.LeaseSeen
	if follow {
		// Read before the probe: a change after it calls for another.
		seen, _ = c.Prober.Lease(ctx)
	}
	name, err := c.choose(ctx, log, "")
	if err != nil || !follow {
		return err
	}
	ticker := time.NewTicker(cmp.Or(c.Recheck, 30*time.Second))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		now, err := c.Prober.Lease(ctx)
		if err != nil || now == seen {
			continue
		}
		log.Info("The kube-controller-manager lease changed; choosing again", "live", now.Live, "holder", now.Holder, "was live", seen.Live, "was holder", seen.Holder)
		seen = now
		if name, err = c.choose(ctx, log, name); err != nil {
			return err
		}
	}
}

// choose probes where asked, decides, and records the choice when it
// differs from current; it returns the choice. "" is returned only when
// ctx ended first.
func (c *Chooser) choose(ctx context.Context, log klog.Logger, current intree.Executor) (intree.Executor, error) {
	var verdict *intree.Verdict
	if c.Asked == intree.ExecutorAuto && c.Served {
		for {
			v, err := c.Prober.Probe(ctx)
			if err == nil {
				verdict = &v
				break
			}
			if ctx.Err() != nil {
				return current, nil
			}
			log.Error(err, "Could not tell whether kube-controller-manager executes in-tree migrations; trying again")
			select {
			case <-ctx.Done():
				return current, nil
			case <-time.After(5 * time.Second):
			}
		}
	}
	name, why, err := intree.Choose(c.Asked, c.Served, verdict)
	if err != nil {
		return current, err
	}
	if !c.Served && c.BetaServed {
		why = "the server serves the in-tree API as " + intree.BetaGroupVersion.String() + " only: svm hands migrations over to " +
			intree.GroupVersion.String() + " (Kubernetes 1.37 and later), runs its own engine, and waits while a " +
			intree.BetaGroupVersion.Version + " migration of the same resource is Running"
	}
	if name == current {
		log.Info("Kept who executes migrations", "executor", string(name), "why", why)
		return name, nil
	}
	e := &Executors{Name: name, Chosen: c.Engine, Engine: c.Engine, Overflow: c.Asked == intree.ExecutorAuto}
	if c.Served {
		e.InTree = c.InTree
	}
	if name == intree.ExecutorInTree {
		e.Chosen = c.InTree
	}
	c.Choice.Set(e)
	c.Metrics.ExecutorChosen(string(name))
	log.Info("Chose who executes migrations", "executor", string(name), "why", why, "was", string(current))
	return name, nil
}
