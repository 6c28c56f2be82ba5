package migrator

import (
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// Tuning is how an operator tunes the engine, in the same words wherever
// it is asked: svm's flags (--workers, --qps, --burst, --chunk-size,
// --chunk-bytes, --adaptive-pacing) and pkg/migrate.Options. Zero values
// take the engine's defaults.
type Tuning struct {
	Workers       int
	QPS           float64
	Burst         int
	ChunkSize     int64
	ChunkBytes    int64
	DisablePacing bool
	FieldManager  string
}

// Options are the engine's options for t: a QPS above 0 is a limiter of
// that rate (NewLimiter), none otherwise.
func (t Tuning) Options() Options {
	return Options{
		Workers: t.Workers, ChunkSize: t.ChunkSize, ChunkBytes: t.ChunkBytes, FieldManager: t.FieldManager,
		DisablePacing: t.DisablePacing, Limiter: NewLimiter(t.QPS, t.Burst),
	}
}

// NewTuned builds the engine over cfg as t tunes it, looking resources up
// with disc (nil: its own) and telling observer (if not nil) what it does.
// svm's own limiter replaces client-go's on the engine's requests, so
// t.QPS is the one limit and 0 means none, whatever limit cfg carries for
// the process's other requests.
func NewTuned(cfg *rest.Config, t Tuning, disc discovery.DiscoveryInterface, observer Observer) (*Migrator, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	opts := t.Options()
	opts.Discovery, opts.Observer = disc, observer
	return New(cfg, opts)
}
