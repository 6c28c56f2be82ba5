package trigger_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestStorageStateEventsAndMetrics follows the widgets' StorageState from
// creation through a storage flip and the pruning of the CRD's
// storedVersions, in its events and in the trigger's metrics.
func TestStorageStateEventsAndMetrics(t *testing.T) {
	t.Parallel()
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"default"}, 50)
	metricsAddr := framework.FreeAddress(t)
	env.StartSVM(t, append(args("10m"), "--metrics-bind-address", metricsAddr)...)

	waitState(t, env, "first migration", persisted(hashV1))
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	waitState(t, env, "migrated to v2", persisted(hashV2))
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return slices.Equal(env.CRDStoredVersions(t, framework.WidgetsCRDName), []string{"v2"}), nil
	})
	if err != nil {
		t.Fatalf("storedVersions stayed %v", env.CRDStoredVersions(t, framework.WidgetsCRDName))
	}

	want := map[string]int{"Created": 1, "MigrationCreated": 2, "StorageVersionChanged": 1, "Migrated": 2, "StoredVersionsPruned": 1}
	var events []eventsv1.Event
	err = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		events = env.Events(t, "StorageState", stateName)
		got := framework.EventReasons(events)
		for reason, n := range want {
			if got[reason] < n {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("events of the storage state %v, want at least %v", framework.EventReasons(events), want)
	}
	for _, ev := range events {
		if ev.ReportingController != "svm-trigger" {
			t.Errorf("event %s reported by %q, want svm-trigger", ev.Reason, ev.ReportingController)
		}
		if ev.Reason == "StorageVersionChanged" && !(strings.Contains(ev.Note, hashV1) && strings.Contains(ev.Note, hashV2)) {
			t.Errorf("StorageVersionChanged note %q does not name both hashes", ev.Note)
		}
		if ev.Reason == "StoredVersionsPruned" && (ev.Related == nil || ev.Related.Name != framework.WidgetsCRDName) {
			t.Errorf("StoredVersionsPruned event relates to %+v, want the CRD", ev.Related)
		}
	}

	// The transitions are counted over all resources
	// (docs/metrics.md#cardinality): one StorageState created for each
	// resource, and one flip and one prune, the widgets'.
	const transitions = "storage_migrator_trigger_storage_state_transitions_total"
	var m framework.Metrics
	var states migrationv1alpha1.StorageStateList
	err = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		m = framework.Scrape(t, metricsAddr)
		if err := env.Client.List(ctx, &states); err != nil {
			return false, err
		}
		return m.Value(transitions, "transition", "created") == float64(len(states.Items)), nil
	})
	if err != nil {
		t.Errorf("%s{transition=\"created\"} = %v with %d StorageStates (%v), want one for each",
			transitions, m.Value(transitions, "transition", "created"), len(states.Items), err)
	}
	for transition, want := range map[string]float64{"storage_version_changed": 1, "stored_versions_pruned": 1} {
		if got := m.Value(transitions, "transition", transition); got != want {
			t.Errorf("%s{transition=%q} = %v, want %v", transitions, transition, got, want)
		}
	}
	// Each resource is migrated at first sight, the widgets once more.
	if got := m.Value(transitions, "transition", "migrated"); got < 2 || got > float64(len(states.Items)+1) {
		t.Errorf("%s{transition=\"migrated\"} = %v, want from 2 (the widgets') to one more than the %d StorageStates",
			transitions, got, len(states.Items))
	}
	if polls := m.Value("storage_migrator_trigger_discovery_polls_total"); polls < 1 {
		t.Errorf("discovery polls = %v, want at least 1", polls)
	}
	if got := m.Value("storage_migrator_core_migrator_migrations", "resource", stateName, "status", "succeeded"); got != 2 {
		t.Errorf("succeeded migrations of widgets = %v, want 2", got)
	}
}
