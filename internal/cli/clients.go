package cli

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/operation"
)

// EngineFlags are the tuning flags shared by commands that migrate.
type EngineFlags struct {
	Workers   int
	QPS       float64
	Burst     int
	ChunkSize int64
	// ChunkBytes is --chunk-bytes as given, a quantity such as 8Mi;
	// validate parses it into chunkBytes.
	ChunkBytes string
	chunkBytes int64
	// AdaptivePacing lets the engine choose the writes in flight from the
	// API server's rate curve (see migrator's pacer).
	AdaptivePacing bool
}

func (f *EngineFlags) addFlags(fs interface {
	IntVar(*int, string, int, string)
	Float64Var(*float64, string, float64, string)
	Int64Var(*int64, string, int64, string)
	BoolVar(*bool, string, bool, string)
	StringVar(*string, string, string, string)
}) {
	fs.IntVar(&f.Workers, "workers", operation.DefaultWorkers, "the most writes in flight per migration, and with --adaptive-pacing for the whole process")
	fs.Float64Var(&f.QPS, "qps", 0, "requests per second to the API server, shared by all migrations (0: unlimited)")
	fs.IntVar(&f.Burst, "burst", operation.DefaultBurst, "requests sent at once at most under --qps (1 spaces them evenly)")
	fs.Int64Var(&f.ChunkSize, "chunk-size", 500, "the most objects listed per request (under --qps, about a second's writes at most)")
	fs.StringVar(&f.ChunkBytes, "chunk-bytes", resource.NewQuantity(operation.DefaultChunkBytes, resource.BinarySI).String(),
		"the most bytes of object metadata one list brings, such as 8Mi")
	fs.BoolVar(&f.AdaptivePacing, "adaptive-pacing", true, "keep the writes in flight near the fewest that get 0.95 of the best rate measured, halved when the API server throttles")
}

func (f *EngineFlags) validate() error {
	switch {
	case f.Workers < 1:
		return fmt.Errorf("--workers must be at least 1, got %d", f.Workers)
	case f.QPS < 0:
		return fmt.Errorf("--qps must not be negative, got %v", f.QPS)
	case f.Burst < 0:
		return fmt.Errorf("--burst must not be negative, got %d", f.Burst)
	case f.ChunkSize < 1:
		return fmt.Errorf("--chunk-size must be at least 1, got %d", f.ChunkSize)
	}
	q, err := resource.ParseQuantity(f.ChunkBytes)
	if err != nil || q.Sign() <= 0 {
		return fmt.Errorf("--chunk-bytes must be a positive quantity of bytes such as 8Mi, got %q", f.ChunkBytes)
	}
	f.chunkBytes = q.Value()
	return nil
}

// tuning is what the flags say of the engine, in the engine's words. The
// operations built with it (operation.New) replace client-go's limiter on
// the engine's requests with svm's own, so --qps is the one limit and
// --qps 0 means none.
func (f *EngineFlags) tuning() operation.Tuning {
	return operation.Tuning{Workers: f.Workers, QPS: f.QPS, Burst: f.Burst, ChunkSize: f.ChunkSize, ChunkBytes: f.chunkBytes, DisablePacing: !f.AdaptivePacing}
}

// restConfig loads the client configuration named by the kubectl flags and
// fails with one readable line when it is missing or broken.
func restConfig(flags *genericclioptions.ConfigFlags) (*rest.Config, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	// Rewriting a deprecated API version draws the same warning on every
	// request; say it once, not once per object.
	cfg.WarningHandler = rest.NewWarningWriter(os.Stderr, rest.WarningWriterOptions{Deduplicate: true})
	return cfg, nil
}

// connectForDiscovery loads the client configuration named by the kubectl
// flags and builds the command's clients over it, at discoveryConfig's
// rate, for svm migrate and svm retire, which resolve the names on their
// command line from what the server serves. It sends no request. They
// read discovery with these clients, not kubectl's cached mapper
// (ConfigFlags.ToRESTMapper): that logs every failed discovery through
// klog before returning the error, so an unreachable server or rejected
// credentials would print the same failure two more times around svm's
// one-line error, and a migration wants what the server serves now, not a
// cache hours old. The set's discovery client reads the per-group-version
// documents, which report storageVersionHash: only with it can
// resources.Resolve tell that two candidates share one storage.
func connectForDiscovery(flags *genericclioptions.ConfigFlags) (*rest.Config, *kubeclients.Set, error) {
	cfg, err := restConfig(flags)
	if err != nil {
		return nil, nil, err
	}
	clients, err := kubeclients.New(discoveryConfig(cfg))
	return cfg, clients, err
}

// discoveryConfig is cfg with the client-side rate limit kubectl allows
// discovery, for the clients of a command whose requests of its own are
// mostly discovery: one request per group version, which client-go's
// default limit would queue.
func discoveryConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 300
	return cfg
}

// clusterReader holds the clients of a command that reads the cluster:
// the dynamic one for svm's API, which has no generated clientset, the
// typed one for the rest, discovery, and each API server's.
type clusterReader struct {
	*kubeclients.Set
}

// connect loads the client configuration named by the kubectl flags and
// builds the clients over it. It sends no request.
func (c *clusterReader) connect(flags *genericclioptions.ConfigFlags) error {
	cfg, err := restConfig(flags)
	if err != nil {
		return err
	}
	c.Set, err = kubeclients.New(cfg)
	return err
}

// unreachable is the error of a command's first request, the one that
// finds out whether the API server can be reached at all.
func (c *clusterReader) unreachable(err error) error {
	// The request's URL repeats the host; say it once.
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	return fmt.Errorf("reach the API server at %s: %w", c.Config.Host, err)
}

// validateOutput checks --output against the formats a command prints.
func validateOutput(output string, outputs []string) error {
	if !slices.Contains(outputs, output) {
		return fmt.Errorf("--output must be one of %s, got %q", strings.Join(outputs, ", "), output)
	}
	return nil
}

// requestInterval is the longest a running migration should need between
// two requests: the time for every worker of every parallel migration to
// get its turn at the --qps limiter (zero when unlimited).
func (f *EngineFlags) requestInterval(maxParallel int) time.Duration {
	if f.QPS <= 0 {
		return 0
	}
	return time.Duration(float64(f.Workers*maxParallel) / f.QPS * float64(time.Second))
}
