package migration

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/operation"
	"github.com/svm-project/svm/internal/scheme"
)

// chunkedExecutor reports one saved chunk per token, then succeeds.
type chunkedExecutor struct{ tokens []string }

func (e chunkedExecutor) Execute(ctx context.Context, run Run) (operation.RunResult, error) {
	for _, token := range e.tokens {
		if err := run.OnChunk(ctx, operation.State{ContinueToken: token}); err != nil {
			return operation.RunResult{}, err
		}
	}
	return operation.RunResult{}, nil
}

// writesOfARun runs a fresh migration with an executor that reports a
// chunk for each token, and returns the migration's writes in order:
// "spec <continueToken>" for a spec patch, "status <Running|Succeeded>"
// for a status patch, by the condition it sets True last.
func writesOfARun(t *testing.T, tokens ...string) []string {
	t.Helper()
	m := mig("widgets", "widgets", 1)
	m.UID = "uid-widgets"
	var writes []string
	cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithStatusSubresource(&migrationv1alpha1.StorageVersionMigration{}).
		WithObjects(&m).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if err := c.Patch(ctx, obj, patch, opts...); err != nil {
					return err
				}
				writes = append(writes, "spec "+obj.(*migrationv1alpha1.StorageVersionMigration).Spec.ContinueToken)
				return nil
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if err := c.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
					return err
				}
				state := "Running"
				if obj.(*migrationv1alpha1.StorageVersionMigration).HasCondition(migrationv1alpha1.MigrationSucceeded) {
					state = "Succeeded"
				}
				writes = append(writes, "status "+state)
				return nil
			},
		}).Build()
	r := &Reconciler{Client: cl, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(t0)}
	r.setDefaults()
	if err := cl.Get(t.Context(), client.ObjectKeyFromObject(&m), &m); err != nil {
		t.Fatal(err)
	}
	r.settle(t.Context(), []ending{r.execute(t.Context(), m.DeepCopy(), chunkedExecutor{tokens: tokens})})
	return writes
}

// A migration that saved a continue token clears it before it says
// Succeeded: a reader who sees Succeeded never sees a token to go on
// from.
func TestTokenClearedBeforeTheOutcome(t *testing.T) {
	got := strings.Join(writesOfARun(t, "t1", ""), ", ")
	want := "status Running, status Running, spec t1, status Running, spec , status Succeeded"
	if got != want {
		t.Errorf("writes %q, want %q", got, want)
	}
}

// A resource listed in one chunk saves none: its outcome saves the
// counters, one write fewer.
func TestOneChunkSavesOnlyItsOutcome(t *testing.T) {
	got := strings.Join(writesOfARun(t, ""), ", ")
	want := "status Running, status Succeeded"
	if got != want {
		t.Errorf("writes %q, want %q", got, want)
	}
}
