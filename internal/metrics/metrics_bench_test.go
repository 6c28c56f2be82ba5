package metrics

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/migrator"
)

// BenchmarkSeriesKeptPerResource reports the heap the metrics keep for
// each resource after a bulk flip, the metric calls made as svm makes them
// for a resource seen, migrated, flipped, migrated again and pruned: what
// stays for the life of the process, multiplied by the cluster's
// resources (docs/metrics.md#cardinality).
func BenchmarkSeriesKeptPerResource(b *testing.B) {
	const resources = 1000
	var kept uint64
	for b.Loop() {
		m := New()
		if err := m.Register(prometheus.NewRegistry()); err != nil {
			b.Fatal(err)
		}
		before := liveHeap()
		for i := range resources {
			recordALife(m, schema.GroupResource{Group: fmt.Sprintf("group%04d.example.com", i), Resource: "widgets"})
		}
		kept = liveHeap() - before
		runtime.KeepAlive(m)
	}
	b.ReportMetric(float64(kept)/resources, "B/resource")
}

// recordALife makes the calls of a resource's life in a bulk flip: two
// migrations (first sight and the flip) and the StorageState's
// transitions.
func recordALife(m *Metrics, r schema.GroupResource) {
	m.StorageStateTransition(r, TransitionCreated)
	for range 2 {
		m.RunStarted(r)
		m.Requested(r, "list", nil)
		m.Listed(r, 10, ptr(int64(0)))
		m.Paced(r, migrator.PacerState{Window: 8, Decision: migrator.PacerGrow})
		m.Requested(r, "patch", nil)
		m.ObjectMigrated(r, false)
		m.Paced(r, migrator.PacerState{Window: 12, Decision: migrator.PacerKnee})
		m.RunEnded(r, nil)
		m.MigrationFinished(r, StatusSucceeded, time.Second)
		m.StorageStateTransition(r, TransitionMigrated)
	}
	m.StorageStateTransition(r, TransitionStorageVersionChanged)
	m.StorageStateTransition(r, TransitionStoredVersionsPruned)
}

func liveHeap() uint64 {
	runtime.GC()
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	return s.HeapAlloc
}
