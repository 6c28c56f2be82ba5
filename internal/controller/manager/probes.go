package manager

import (
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// leaderElectionID names the Lease the replicas of `svm controller` elect
// their leader with.
const leaderElectionID = "svm-controller.migration.k8s.io"

// leaseLock builds the leader election lock as the manager would, so that
// it can be wrapped for the probes (see health.Tracker.WrapLock).
func leaseLock(cfg *rest.Config, namespace string) (resourcelock.Interface, error) {
	lock, err := leaderelection.NewResourceLock(cfg, noLeaseEvents{}, leaderelection.Options{
		LeaderElection:          true,
		LeaderElectionID:        leaderElectionID,
		LeaderElectionNamespace: namespace,
		// The manager's default; it bounds each request of the elector.
		RenewDeadline: 10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	return lock, nil
}

// noLeaseEvents gives the lease lock no event recorder. The lock's events
// ("... became leader") use the core events API in svm's own namespace,
// which svm's RBAC does not grant; the Lease itself shows its holder.
type noLeaseEvents struct{}

func (noLeaseEvents) GetEventRecorderFor(string) record.EventRecorder { return nil }

func (noLeaseEvents) GetEventRecorder(string) recorder.EventRecorder { return nil }
