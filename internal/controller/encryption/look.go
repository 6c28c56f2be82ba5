package encryption

import (
	"context"
	"time"

	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/svm-project/svm/internal/apiservers"
	"github.com/svm-project/svm/internal/metrics"
	"github.com/svm-project/svm/internal/rotation"
)

// scrapeTimeout bounds the reading of one API server's metrics.
const scrapeTimeout = 30 * time.Second

// Look reads every API server's report and puts them together.
func Look(ctx context.Context, leases coordinationv1.LeasesGetter, cfg *rest.Config, given []string, now time.Time) (rotation.Agreement, error) {
	ids, err := apiservers.Identities(ctx, leases, now)
	var idErr error
	if err != nil {
		// Without the leases, the servers reached are taken to be all:
		// say so, since a server not reached then goes unnoticed.
		idErr = err
		ids = nil
	}
	var reports []apiservers.Report
	var failures []rotation.Failure
	for _, endpoint := range apiservers.Endpoints(given, cfg.Host, ids) {
		sctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
		r, err := apiservers.Scrape(sctx, cfg, endpoint)
		cancel()
		if err != nil {
			failures = append(failures, rotation.Failure{Endpoint: endpoint, Err: err})
			continue
		}
		reports = append(reports, r)
	}
	return rotation.Agree(ids, reports, failures), idErr
}

// lookAtServers is the first step of a round: what the API servers have
// loaded, together, as the metrics and the log tell it.
func (c *Controller) lookAtServers(ctx context.Context) rotation.Agreement {
	log := klog.FromContext(ctx)
	a, err := Look(ctx, c.Leases, c.Config, c.Endpoints, c.Clock.Now())
	if err != nil {
		log.Error(err, "API servers not known from their identity leases; taking the ones reached to be all")
	}
	servers := make([]metrics.EncryptionServer, 0, len(a.Servers))
	for _, s := range a.Servers {
		servers = append(servers, metrics.EncryptionServer{IDHash: s.IDHash, ConfigHash: s.ConfigHash, Reached: s.Reached})
	}
	c.Metrics.EncryptionChecked(a.Agreed, servers)
	// Log a change of agreement, not every round's.
	if a.Waiting != c.waiting {
		if a.Waiting != "" {
			log.Info("Re-encryption waits for the API servers", "reason", a.Waiting)
		} else {
			log.Info("Every API server has loaded the same encryption configuration", "configHash", a.ConfigHash, "since", a.Since, "servers", len(a.Servers))
		}
		c.waiting = a.Waiting
	}
	return a
}
