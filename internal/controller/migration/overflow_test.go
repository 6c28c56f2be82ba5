package migration

import (
	"context"
	"testing"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/operation"
)

// namedExecutor tells executors apart in a test.
type namedExecutor struct{ name string }

func (n namedExecutor) Execute(context.Context, Run) (operation.RunResult, error) {
	return operation.RunResult{}, nil
}

// TestExecutorsForOverflowToTheEngine: with --executor=auto and the
// in-tree migrator chosen, a migration is handed over only while
// kube-controller-manager has a worker free of svm's hand-overs; beyond
// that svm's engine runs it. A migration already handed over stays with
// the in-tree executor, and --executor=in-tree never overflows.
func TestExecutorsForOverflowToTheEngine(t *testing.T) {
	engine, inTree := namedExecutor{name: "engine"}, namedExecutor{name: "in-tree"}
	fresh := &migrationv1alpha1.StorageVersionMigration{}
	handed := &migrationv1alpha1.StorageVersionMigration{Status: migrationv1alpha1.StorageVersionMigrationStatus{InTreeMigration: "m-1"}}
	auto := &Executors{Name: intree.ExecutorInTree, Chosen: inTree, InTree: inTree, Engine: engine, Overflow: true}
	asked := &Executors{Name: intree.ExecutorInTree, Chosen: inTree, InTree: inTree, Engine: engine}
	own := &Executors{Name: intree.ExecutorSVM, Chosen: engine, InTree: inTree, Engine: engine, Overflow: true}
	tests := []struct {
		name       string
		executors  *Executors
		m          *migrationv1alpha1.StorageVersionMigration
		handedOver int
		want       string
		wantInTree bool
	}{
		{"auto, a worker free", auto, fresh, intree.RunnerWorkers - 1, "in-tree", true},
		{"auto, every worker busy: svm's engine", auto, fresh, intree.RunnerWorkers, "engine", false},
		{"auto, already handed over: followed", auto, handed, intree.RunnerWorkers, "in-tree", true},
		{"in-tree asked: queued behind it", asked, fresh, intree.RunnerWorkers + 3, "in-tree", true},
		{"svm chosen", own, fresh, 0, "engine", false},
		{"svm chosen, one handed over before: followed", own, handed, 0, "in-tree", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, inTree := tt.executors.For(tt.m, tt.handedOver)
			if got := ex.(namedExecutor).name; got != tt.want || inTree != tt.wantInTree {
				t.Errorf("For = %s (in-tree %v), want %s (in-tree %v)", got, inTree, tt.want, tt.wantInTree)
			}
		})
	}
}
