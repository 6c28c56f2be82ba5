package encryption

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"

	"github.com/svm-project/svm/internal/apiservers"
	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/metrics"
	"github.com/svm-project/svm/internal/rotation"
)

// scrapeTimeout bounds the reading of one API server's metrics.
const scrapeTimeout = 30 * time.Second

// Look reads every API server's report and puts them together.
func Look(ctx context.Context, leases coordinationv1.LeasesGetter, servers *kubeclients.Endpoints, given []string, now time.Time) (rotation.Agreement, error) {
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
	for _, endpoint := range apiservers.Endpoints(given, servers.Host(), ids) {
		// An address given, or one a lease publishes, is one server's; the
		// kubeconfig's may be a load balancer's, unless one server runs.
		own := len(given) > 0 || endpoint != servers.Host() || len(ids) == 1
		r, err := scrape(ctx, servers, endpoint, own)
		if err != nil {
			failures = append(failures, rotation.Failure{Endpoint: endpoint, Err: err})
			continue
		}
		reports = append(reports, r)
	}
	return rotation.Agree(ids, reports, failures), idErr
}

// scrape reads the report of the API server at endpoint and, when it has
// KMS v2 keys, asks its kms-providers check after, if endpoint is the
// server's own address (own): through a load balancer, the check may be
// answered by another server than the metrics.
func scrape(ctx context.Context, servers *kubeclients.Endpoints, endpoint string, own bool) (apiservers.Report, error) {
	client, err := servers.For(endpoint)
	if err != nil {
		return apiservers.Report{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	r, err := apiservers.Scrape(ctx, client, endpoint)
	switch {
	case err != nil || len(r.KMS) == 0:
	case own:
		r.KMSChecked, r.KMSCheckProblem = true, apiservers.CheckKMS(ctx, client, endpoint)
	default:
		r.KMSCheckProblem = "it was read through " + endpoint + ", which may be a load balancer's address (give each API server's own with --apiserver-endpoints)"
	}
	return r, err
}

// lookAtServers is the first step of a round: what the API servers have
// loaded, together, as the metrics and the log tell it.
func (c *Controller) lookAtServers(ctx context.Context) rotation.Agreement {
	log := klog.FromContext(ctx)
	now := c.Clock.Now()
	a, err := Look(ctx, c.Leases, c.Servers, c.Endpoints, now)
	if err != nil {
		log.Error(err, "API servers not known from their identity leases; taking the ones reached to be all")
	}
	c.pinKMSSince(&a, c.Clock.Now())
	c.notBeforeLastChange(&a, now)
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
			log.Info("Every API server has loaded the same encryption configuration", "configHash", a.ConfigHash,
				"kmsKeys", rotation.FormatKMSKeys(a.KMSKeys), "since", a.Since, "servers", len(a.Servers))
		}
		c.waiting = a.Waiting
	}
	return a
}

// notBeforeLastChange keeps a.Since, when the servers last loaded the
// configuration they agree on, after the beginning of the last look that
// saw them otherwise: they loaded it after that look read them.
//
// a.Since is what the servers' metrics say, and one read of them can be
// torn: kube-apiserver records a reload's time and then its
// configuration's hash, in two metrics that a read gathers apart, and a
// read that takes the time before a reload and the hash after it pairs
// the new hash with the previous reload's time. Taken as it is, that time
// would credit a migration made before the new configuration was loaded
// (the trigger's first round, say) with re-encrypting under it, and svm
// would say the old keys are no longer needed while objects are still
// under them.
//
// A look that reached only some servers, all still on the configuration
// the look before agreed on, sees what that look saw: a server that could
// not be read is no news, and counting it as a change would date the
// configuration after the re-encryption that went on meanwhile
// (rotation's wait), which would then be made again.
func (c *Controller) notBeforeLastChange(a *rotation.Agreement, now time.Time) {
	const agreed = "agreed: "
	seen := "waiting: " + a.Waiting
	switch {
	case a.Agreed:
		seen = agreed + a.Target()
	case strings.HasPrefix(c.lastSeen, agreed) && !a.Contradicts(strings.TrimPrefix(c.lastSeen, agreed)):
		seen = c.lastSeen
	}
	if !c.lastLook.IsZero() && seen != c.lastSeen {
		c.changedAfter = c.lastLook
	}
	c.lastLook, c.lastSeen = now, seen
	if a.Agreed && a.Since.Before(c.changedAfter) {
		a.Since = c.changedAfter
	}
}

// pinKMSSince keeps a.KMSSince, when the last server swapped to the KMS v2
// keys the servers agree on, at the end of the first look that saw them
// agree on those keys, with the same history of other keys.
//
// The metrics bound the swap only by the newest Status answer naming the
// key, which every server renews each minute: taken as it is, it would
// date the agreement anew at every look, and no re-encryption, which runs
// for longer, would ever be credited. A look that saw every server write
// under the keys (or answer its kms-providers check ok) proves each had
// swapped before the look ended, so that end is a bound that holds still.
// The history (when each server last answered, or wrote under, another
// key) is part of what is seen: a server that went to another key and
// back between two looks may have written under it meanwhile, and the
// agreement is then dated anew. After svm restarts, the first look dates
// it: a re-encryption under way is then made again, never credited early.
func (c *Controller) pinKMSSince(a *rotation.Agreement, end time.Time) {
	if !a.Agreed || len(a.KMSKeys) == 0 {
		c.kmsSeen, c.kmsSince = "", time.Time{}
		return
	}
	seen := kmsHistory(*a)
	if seen != c.kmsSeen {
		c.kmsSeen, c.kmsSince = seen, end
	}
	a.KMSSince, a.Since = c.kmsSince, c.kmsSince
	if a.ConfigSince.After(a.Since) {
		a.Since = a.ConfigSince
	}
}

// kmsHistory is the KMS v2 keys a agrees on, and what each server had
// last seen of other keys, in words that compare.
func kmsHistory(a rotation.Agreement) string {
	var b strings.Builder
	b.WriteString(a.Target())
	for _, s := range a.Servers {
		for _, k := range s.KMS {
			fmt.Fprintf(&b, " %s/%s:%s", s.IDHash, k.Provider, k.OtherAt().Format(time.RFC3339Nano))
		}
	}
	return b.String()
}
