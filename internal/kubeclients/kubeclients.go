// Package kubeclients builds the clients svm talks to the API server with,
// once per process, over one HTTP client.
//
// Each client built from a rest.Config opens connections of its own, and a
// discovery client keeps what it read; a process that builds one per
// controller, per check and per round holds a dozen of each, and a
// question asked through two of them may get two answers. Every command
// builds one Set from its rest.Config and hands its clients down; New and
// NewDiscovery are the only places in svm that build discovery clients,
// and Built counts what they built, so that a test can hold a command to
// one.
package kubeclients

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	eventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// Set is the clients of one process, over one HTTP client.
type Set struct {
	// Config is the configuration they were built from.
	Config *rest.Config
	// Discovery reads the per-group-version documents, which report
	// storageVersionHash (see NewDiscovery). It caches nothing: every
	// question reads the server afresh, as the trigger needs.
	Discovery *discovery.DiscoveryClient
	// BulkDiscovery is Discovery again, over the same connections with a
	// client-side rate limit of its own, for the reads of every group
	// version at once (the trigger's discovery): with a thousand CRDs,
	// that is two thousand requests, which held every other discovery
	// read (each migration's) behind them for 40 seconds.
	BulkDiscovery *discovery.DiscoveryClient
	Kube          kubernetes.Interface
	Dynamic       dynamic.Interface
	Metadata      metadata.Interface
	CRDs          apiextensionsclient.Interface
	// Events creates svm controller's Events, with a client-side rate
	// limit of its own (as BulkDiscovery), so that the thousands after a
	// bulk flip do not hold the trigger's and the migrations' requests
	// behind them.
	Events eventsv1.EventsV1Interface
	// Servers reaches each API server at its own address, for what only
	// that server can tell (its /metrics).
	Servers *Endpoints
	// Clock is the API server's clock, learnt from the answers to every
	// client built over Config: what svm compares the times the server
	// stamps with, never this machine's clock.
	Clock *ServerClock
}

// New builds a Set over cfg. It sends no request. The Set's Config is a
// copy of cfg whose transport tells the Set's Clock the API server's time,
// so that what else is built over it (controller-runtime's manager, the
// engine) keeps the clock up to date too.
func New(cfg *rest.Config) (*Set, error) {
	if localSkewErr != nil {
		return nil, localSkewErr
	}
	clk := newServerClock(cfg, localNow)
	// Each API server's own client (Servers) stays off the clock: it
	// reaches the server behind every address, each with its own clock.
	s := &Set{Servers: NewEndpoints(cfg), Clock: clk}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(clk.observe)
	s.Config = cfg
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("build the HTTP client: %w", err)
	}
	if s.Discovery, err = NewDiscovery(cfg, httpClient); err != nil {
		return nil, err
	}
	if s.BulkDiscovery, err = NewDiscovery(cfg, httpClient); err != nil {
		return nil, err
	}
	if s.Kube, err = kubernetes.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, fmt.Errorf("build the clientset: %w", err)
	}
	if s.Dynamic, err = dynamic.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, fmt.Errorf("build the dynamic client: %w", err)
	}
	if s.Metadata, err = metadata.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, fmt.Errorf("build the metadata client: %w", err)
	}
	if s.CRDs, err = apiextensionsclient.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, fmt.Errorf("build the CRD client: %w", err)
	}
	if s.Events, err = eventsv1.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, fmt.Errorf("build the events client: %w", err)
	}
	sets.Add(1)
	return s, nil
}

// NewDiscovery builds a discovery client over httpClient that reads the
// per-group-version documents: they report storageVersionHash, which the
// aggregated discovery document does not carry. Use a Set's where there
// is one; this is for the engine built alone (migrator.New without one).
func NewDiscovery(cfg *rest.Config, httpClient *http.Client) (*discovery.DiscoveryClient, error) {
	d, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("build the discovery client: %w", err)
	}
	d.UseLegacyDiscovery = true
	discoveries.Add(1)
	return d, nil
}

// Endpoints builds a REST client per API server address, with one
// configuration's credentials, once per address: the re-encryption
// controller reads every API server's /metrics every minute, and a
// client per read would open new connections every time.
type Endpoints struct {
	cfg     *rest.Config
	mu      sync.Mutex
	clients map[string]*discovery.DiscoveryClient
}

// NewEndpoints returns the Endpoints of cfg's credentials.
func NewEndpoints(cfg *rest.Config) *Endpoints {
	return &Endpoints{cfg: cfg, clients: map[string]*discovery.DiscoveryClient{}}
}

// Host is the address cfg names, the API server a client reaches when
// no other is known.
func (e *Endpoints) Host() string { return e.cfg.Host }

// For is the client of the API server at endpoint (https://host:port),
// for requests outside the API groups, such as /metrics.
func (e *Endpoints) For(endpoint string) (rest.Interface, error) {
	d, err := e.DiscoveryFor(endpoint)
	if err != nil {
		return nil, err
	}
	return d.RESTClient(), nil
}

// DiscoveryFor is the discovery client of the API server at endpoint,
// reading the per-group-version documents (which carry storage version
// hashes), like Set's.
func (e *Endpoints) DiscoveryFor(endpoint string) (*discovery.DiscoveryClient, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := e.clients[endpoint]; ok {
		return d, nil
	}
	cfg := rest.CopyConfig(e.cfg)
	cfg.Host = endpoint
	// A discovery client's REST client is client-go's unversioned one,
	// set up for paths outside the API groups.
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build a client of %s: %w", endpoint, err)
	}
	d.UseLegacyDiscovery = true
	e.clients[endpoint] = d
	return d, nil
}

var sets, discoveries atomic.Int64

// Built is how many Sets and discovery clients this process has built.
func Built() (setsBuilt, discoveryClients int64) {
	return sets.Load(), discoveries.Load()
}
