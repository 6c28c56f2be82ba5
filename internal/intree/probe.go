package intree

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ProbeResource is what a probe migration names: pod templates, a
// built-in resource that almost every cluster leaves empty, so that the
// probe costs nothing even if kube-controller-manager gets as far as
// rewriting (an object already in its storage version is left as it is in
// etcd). The probe is deleted as soon as it has shown
// kube-controller-manager at work, usually before anything is written.
var ProbeResource = metav1.GroupResource{Group: "", Resource: "podtemplates"}

// ControllerManagerLease is the lease every kube-controller-manager with
// leader election (the default) holds.
var ControllerManagerLease = client.ObjectKey{Namespace: "kube-system", Name: "kube-controller-manager"}

// LeaseLive reports whether a kube-controller-manager renewed its lease
// recently enough to be running now: within the lease's duration, plus a
// margin for renewals in flight.
func LeaseLive(l *coordinationv1.Lease, now time.Time) bool {
	if l == nil || l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return false
	}
	duration := 15 * time.Second
	if l.Spec.LeaseDurationSeconds != nil {
		duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return now.Sub(l.Spec.RenewTime.Time) <= duration+10*time.Second
}

// LeaseSeen is what a read of the kube-controller-manager lease shows:
// what an executor choice rests on, and what, changed, calls for another
// probe.
type LeaseSeen struct {
	// Live: the lease is held and renewed (LeaseLive).
	Live bool
	// Holder is its holder's identity, which a restarted
	// kube-controller-manager changes.
	Holder string
}

// Lease reads the kube-controller-manager lease. A missing lease, or one
// svm may not read, is a lease not live; an error means it could not
// tell.
func (p Prober) Lease(ctx context.Context) (LeaseSeen, error) {
	clk := p.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	var lease coordinationv1.Lease
	err := p.Reader.Get(ctx, ControllerManagerLease, &lease)
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		return LeaseSeen{}, nil
	case err != nil:
		return LeaseSeen{}, fmt.Errorf("read the kube-controller-manager lease: %w", err)
	}
	seen := LeaseSeen{Live: LeaseLive(&lease, clk.Now())}
	if lease.Spec.HolderIdentity != nil {
		seen.Holder = *lease.Spec.HolderIdentity
	}
	return seen, nil
}

// Prober finds out whether kube-controller-manager executes in-tree
// migrations.
type Prober struct {
	// Client creates and deletes the probe migration.
	Client client.Client
	// Reader reads the lease and the probe migration from the API server,
	// not a cache.
	Reader client.Reader
	Clock  clock.Clock
	// StartTimeout bounds how long kube-controller-manager may take to
	// mark the probe Running; its runner does so as soon as its informer
	// sees the object. Default 15 seconds.
	StartTimeout time.Duration
	// Timeout bounds the whole probe. Default 1 minute.
	Timeout time.Duration
	// Interval between reads of the probe. Default 500 milliseconds.
	Interval time.Duration
}

// Probe answers whether kube-controller-manager executes in-tree
// migrations. Without a live kube-controller-manager lease it answers no
// at once; otherwise it creates a migration of ProbeResource and deletes
// it, whatever the outcome, once kube-controller-manager has taken it up:
// its runner marked it Running and its resource-version controller
// recorded the resourceVersion to migrate up to. Those controllers start
// together with the one that rewrites, and only when the garbage collector
// it reads objects from runs, so taking the probe up shows the whole
// migrator at work. Waiting for the probe to succeed would show no more
// and take up to a minute: the rewriting waits until the garbage
// collector's cache of the resource has caught up with that
// resourceVersion, which for a resource nobody writes takes a watch
// bookmark. A probe that fails is an answer too.
//
// An error means it could not tell (the API server did not answer); a
// forbidden request is an answer.
func (p Prober) Probe(ctx context.Context) (Verdict, error) {
	clk := p.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	startTimeout := cmpOr(p.StartTimeout, 15*time.Second)
	timeout := cmpOr(p.Timeout, time.Minute)
	interval := cmpOr(p.Interval, 500*time.Millisecond)

	var lease coordinationv1.Lease
	err := p.Reader.Get(ctx, ControllerManagerLease, &lease)
	switch {
	case apierrors.IsNotFound(err):
		return Verdict{Reason: "no kube-controller-manager lease in " + ControllerManagerLease.String()}, nil
	case apierrors.IsForbidden(err):
		return Verdict{Reason: "svm may not read the lease " + ControllerManagerLease.String() + " (the Role svm-controller-manager-lease in config/rbac)"}, nil
	case err != nil:
		return Verdict{}, fmt.Errorf("read the kube-controller-manager lease: %w", err)
	case !LeaseLive(&lease, clk.Now()):
		return Verdict{Reason: "the kube-controller-manager lease " + ControllerManagerLease.String() + " is not being renewed"}, nil
	}

	m := &storagemigrationv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "svm-executor-probe-", Labels: map[string]string{CreatedByLabel: CreatedByProbe}},
		Spec:       storagemigrationv1.StorageVersionMigrationSpec{Resource: ProbeResource},
	}
	if err := p.Client.Create(ctx, m); err != nil {
		if apierrors.IsForbidden(err) {
			return Verdict{Reason: "svm may not create in-tree migrations: " + err.Error()}, nil
		}
		return Verdict{}, fmt.Errorf("create the probe migration: %w", err)
	}
	defer func() {
		del, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = p.Client.Delete(del, m, client.Preconditions{UID: &m.UID})
	}()

	start := clk.Now()
	for {
		got := &storagemigrationv1.StorageVersionMigration{}
		if err := p.Reader.Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
			return Verdict{}, fmt.Errorf("read the probe migration %s: %w", m.Name, err)
		}
		took := clk.Since(start).Round(100 * time.Millisecond)
		switch {
		case Succeeded(got) || IsRunning(got) && got.Status.ResourceVersion != "":
			return Verdict{Acts: true, Reason: fmt.Sprintf("its storage-version-migrator-controller took up probe migration %s of %s within %s", m.Name, ProbeResource.String(), took)}, nil
		case Failed(got):
			return Verdict{Reason: fmt.Sprintf("its probe migration %s of %s failed: %s", m.Name, ProbeResource.String(), Message(got))}, nil
		case len(got.Status.Conditions) == 0 && took >= startTimeout:
			return Verdict{Reason: fmt.Sprintf("it did not start the probe migration %s within %s: is its storage-version-migrator-controller running?", m.Name, startTimeout)}, nil
		case took >= timeout:
			return Verdict{Reason: fmt.Sprintf("it did not take up the probe migration %s within %s (Running, with status.resourceVersion)", m.Name, timeout)}, nil
		}
		select {
		case <-ctx.Done():
			return Verdict{}, ctx.Err()
		case <-clk.After(interval):
		}
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
