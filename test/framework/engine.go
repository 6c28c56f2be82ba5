package framework

import (
	"testing"

	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/migrator"
)

// NewMigrator builds svm's migration engine, as `svm migrate` and the
// controller do, on clients of a copy of cfg whose requests are counted.
// The counter sees this engine's requests alone, whatever else runs on
// the control plane; callers that do not count may ignore it.
func NewMigrator(t testing.TB, cfg *rest.Config, opts migrator.Options) (*migrator.Migrator, *RequestCounter) {
	t.Helper()
	cfg, counter := Counting(cfg)
	m, err := migrator.New(cfg, opts)
	if err != nil {
		t.Fatalf("build the engine: %v", err)
	}
	return m, counter
}
