package trigger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/trigger"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestSecondMigrationOfAChangeWritesOnlyWhatNeedsIt: the trigger records
// the revision from which every API server stores widgets in v2 when it
// starts the migration of the flip. The migration rewrites half the
// widgets; a webhook denies the other half, so it fails. Their own
// writers then rewrite those. The trigger's retry, a second migration for
// the same change, finds every widget written since the revision: it
// lists them and the API server counts no write.
func TestSecondMigrationOfAChangeWritesOnlyWhatNeedsIt(t *testing.T) {
	t.Parallel()
	const n = 200
	// Widgets written through v2 (stored in v1 until the flip) have no
	// managedFields entry naming v1: no write is owed to move them off
	// the version the flip retires.
	env := framework.StartWithWidgets(t, controlplane.Options{}, nil, 0)
	env.CreateWidgets(t, "v2", []string{"default"}, n)
	// The retry waits long enough for the writers below.
	metricsAddr := framework.FreeAddress(t)
	svm := env.StartSVM(t, append(args("10m"), "--trigger-retry-delay", "20s", "--metrics-bind-address", metricsAddr)...)
	waitState(t, env, "first sight migrated", persisted(hashV1))

	// Widgets with an even index are denied any write that leaves them
	// without the label their writers add.
	denied := func(name string) bool {
		var i int
		_, err := fmt.Sscanf(name, "widget-%05d", &i)
		return err == nil && i%2 == 0
	}
	framework.StartAdmissionWebhook(t, env, framework.AdmissionHook{
		Resource: framework.WidgetResource,
		Review: func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			var obj metav1.PartialObjectMetadata
			if err := json.Unmarshal(req.Object.Raw, &obj); err != nil || !denied(req.Name) || obj.Labels["rewritten-by"] == "writer" {
				return &admissionv1.AdmissionResponse{Allowed: true}
			}
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusForbidden, Message: "test policy denies " + req.Name}}
		},
	})

	env.FlipStorage(t, framework.WidgetResource)
	first := waitOwnedMigration(t, env, migrationv1alpha1.MigrationFailed)
	state := waitState(t, env, "a revision recorded", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.CurrentStorageVersionHash == hashV2 && s.Status.CurrentStorageVersionRevision != ""
	})
	if p := first.Status.Progress; p.Restored != n/2 || p.Failed != n/2 {
		t.Fatalf("first migration: progress %+v, want %d re-stored and %d failed", p, n/2, n/2)
	}
	if created, revision := first.Status.ResourceVersionCheckpoint, state.Status.CurrentStorageVersionRevision; framework.Revision(t, revision) > framework.Revision(t, created) {
		t.Errorf("revision %s recorded after the migration's checkpoint %s: it must be read before the migration is created", revision, created)
	}

	ctx := framework.Context(t, time.Minute)
	v2 := framework.Widgets
	v2.Version = "v2"
	widgets := env.Dynamic.Resource(v2)
	for i := 0; i < n; i += 2 {
		name := fmt.Sprintf("widget-%05d", i)
		if _, err := widgets.Namespace("default").Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"rewritten-by":"writer"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("writer: %v", err)
		}
	}
	before := env.TakeSnapshot(t, framework.Widgets)
	updates := env.ServerWrites(t, "widgets")

	second := waitOwnedMigration(t, env, migrationv1alpha1.MigrationSucceeded)
	if second.Name == first.Name {
		t.Fatalf("the migration that failed succeeded later: %s", first.Name)
	}
	if got := env.ServerWrites(t, "widgets") - updates; got != 0 {
		t.Errorf("the API server counted %d writes of widgets in the second migration, want none", got)
	}
	if p := second.Status.Progress; p.Listed != n || p.WrittenSinceChange != n {
		t.Errorf("second migration: progress %+v, want all %d listed and written since the change", p, n)
	}
	env.ExpectStored(t, framework.EtcdPrefix(framework.Widgets.GroupResource()), map[string]int{"example.com/v2": n})
	env.ExpectUnchanged(t, framework.Widgets, before)
	waitState(t, env, "only v2 persisted", persisted(hashV2))
	// The skipped widgets are counted like the others.
	expectCountsAddUp(t, env, svm, metricsAddr, framework.WidgetResource)
}

// waitOwnedMigration waits for a trigger migration of widgets to v2 with
// condition cond, the newest if several have it.
func waitOwnedMigration(t *testing.T, env *framework.Env, cond migrationv1alpha1.MigrationConditionType) migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var found migrationv1alpha1.StorageVersionMigration
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		ok := false
		for _, m := range widgetMigrations(t, env) {
			if trigger.IsOwned(&m) && trigger.TargetHash(&m) == hashV2 && m.HasCondition(cond) {
				found, ok = m, true
			}
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("no migration of widgets to v2 with %s: %v", cond, err)
	}
	return found
}
