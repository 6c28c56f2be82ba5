package migration

import (
	"fmt"
	"testing"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/followup"
)

// BenchmarkScheduleAfterABulkFlip is one call of Schedule as the
// scheduler makes it after a thousand CRDs flipped at once: a thousand
// migrations for the change waiting (made by the trigger, each of its own
// resource), four running, and the two thousand finished ones each
// resource keeps. The scheduler is called on every change of a
// migration, several times per migration run.
func BenchmarkScheduleAfterABulkFlip(b *testing.B) {
	var ms []migrationv1alpha1.StorageVersionMigration
	for i := range 1000 {
		resource := fmt.Sprintf("things%04d", i)
		for j := range 2 {
			ms = append(ms, triggered(mig(fmt.Sprintf("%s-done-%d", resource, j), resource, j, migrationv1alpha1.MigrationSucceeded), followup.ReasonFirstSight))
		}
		ms = append(ms, triggered(mig(resource+"-flip", resource, 10+i%60), followup.ReasonChanged))
	}
	running := map[string]bool{}
	for i := range 4 {
		running[fmt.Sprintf("things%04d-flip", i)] = true
	}
	in := ScheduleInput{Migrations: ms, Running: running, MaxParallel: 8, Now: t0}
	b.ReportAllocs()
	for b.Loop() {
		if d := Schedule(in); len(d.Start) != 4 {
			b.Fatalf("started %v, want 4", d.Start)
		}
	}
}
