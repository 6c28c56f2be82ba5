// Package badinput_test feeds svm bad input on a real control plane: specs
// that must be rejected, resources, namespaces and objects that vanish or
// are being deleted while a migration runs, objects near etcd's size limit,
// two migrations of one resource, admission webhooks that time out or
// change what svm writes, and servers and credentials that do not work.
// Each scenario ends with a clear error or a condition with a reason, loses
// nothing (checked in etcd and against the objects' contents), and bounds
// the requests it costs. Each prints one SCENARIO line (framework.Scenario).
//
// Bad input covered elsewhere, not repeated here:
//   - invalid specs, and spec.resource changed by an update:
//     api.TestValidation;
//   - a resource, group or version that is not served, a resource without
//     list and patch: controller.TestImpossibleMigrationsFailFast and
//     migrator.TestTerminalErrorsFailFastWithBoundedRequests;
//   - a migration deleted while it runs:
//     controller.TestDeletingAMigrationStopsItsWork;
//   - an admission webhook that denies:
//     controller.TestWebhookDenialsFailTheMigrationNamingTheObjects;
//   - usage errors, a missing kubeconfig and RBAC denials of `svm migrate`:
//     cli.TestMigrateBadInput; the controller without its CRDs:
//     controller.TestControllerWithoutCRDsSaysSo; the controller and CLI
//     without their roles: security.TestControllerWithoutItsRoles and
//     security.TestCLIRoles.
package badinput_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// Flags of the one `svm controller` the scenarios share. The chunk is small
// so that a few hundred objects make several chunks; --qps stretches a
// migration of a few hundred objects over seconds, long enough to watch
// what happens while it runs.
const (
	chunkSize = 100
	qps       = 100
)

// suite is the control plane and controller the scenarios share. They
// never interfere: each has its own CRD (its own plural, since the API
// server's request counts name the plural only), namespaces and
// migrations.
type suite struct {
	env *framework.Env
	// metrics is the address of the controller's metrics endpoint.
	metrics string
	// encryptionKey writes Secrets; identity still reads values written
	// before encryption was turned on.
	encryptionKey string
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	key := framework.NewEncryptionKey(t, "current")
	env := framework.Start(t, controlplane.Options{APIServerFlags: []string{framework.WriteEncryptionConfig(t, t.TempDir(), key)}})
	env.InstallCRDs(t, framework.CRDBasesDir())
	s := &suite{env: env, metrics: framework.FreeAddress(t), encryptionKey: key.Name}
	env.StartSVM(t, "controller", "--trigger=false", "--leader-elect=false", "--max-parallel", "4",
		"--chunk-size", fmt.Sprint(chunkSize), "--qps", fmt.Sprint(qps), "--metrics-bind-address", s.metrics, "--health-probe-bind-address", "0")

	// Two lanes: a webhook that times out costs over a minute of backoff by
	// design, and runs beside everything else rather than before it.
	t.Run("lanes", func(t *testing.T) {
		t.Run("slow", func(t *testing.T) {
			t.Parallel()
			t.Run("admission webhook times out", s.webhookTimesOut)
		})
		t.Run("quick", func(t *testing.T) {
			t.Parallel()
			t.Run("spec changes rejected", s.specChangesRejected)
			t.Run("CRD deleted after the last list", s.crdDeletedAfterLastList)
			t.Run("CRD deleted before the list ends", s.crdDeletedBeforeListEnds)
			t.Run("namespace deleted mid-migration", s.namespaceDeleted)
			t.Run("objects being deleted, with finalizers", s.objectsBeingDeleted)
			t.Run("objects near the size limit", s.largeObjects)
			t.Run("two migrations of one resource", s.twoMigrations)
			t.Run("admission webhook mutates", s.webhookMutates)
			t.Run("unusable server or credentials", s.unusableConnection)
		})
	})
}

// expectSettled checks that a finished migration stays as it is: no status
// write, so no retry loop, for a while after it ended.
func (s *suite) expectSettled(t *testing.T, name string) {
	t.Helper()
	before := s.env.GetMigration(t, name).ResourceVersion
	time.Sleep(2 * time.Second)
	if after := s.env.GetMigration(t, name); after.ResourceVersion != before {
		t.Errorf("migration %s was written again after it finished (resourceVersion %s -> %s): %+v", name, before, after.ResourceVersion, after.Status.Conditions)
	}
}

// retries is how many requests the controller repeated for r after a
// transient error, from its own metrics.
func (s *suite) retries(t *testing.T, r framework.Resource) int {
	t.Helper()
	return s.controllerMetric(t, "storage_migrator_core_migrator_retries_total", r)
}

// controllerMetric sums the controller's counter name for r over the
// series that have labels (name, value, ...).
func (s *suite) controllerMetric(t *testing.T, name string, r framework.Resource, labels ...string) int {
	t.Helper()
	family := framework.Scrape(t, s.metrics)[name]
	if family == nil {
		return 0
	}
	want := map[string]string{"resource": r.Plural + "." + r.Group}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	total := 0.0
	for _, m := range family.Metric {
		matched := 0
		for _, l := range m.Label {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				matched++
			}
		}
		if matched == len(want) {
			total += m.Counter.GetValue()
		}
	}
	return int(total)
}
