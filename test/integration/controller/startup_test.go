package controller_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// leaseName is the Lease svm controller elects its leader with.
const leaseName = "svm-controller.migration.k8s.io"

// workstationArgs run `svm controller` as someone would from a
// workstation: leader election on (the default) and no
// --leader-election-namespace. The endpoints are off so that parallel
// tests never fight over ports.
var workstationArgs = []string{"controller", "--trigger=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0"}

const missingCRDsMessage = "svm: the server does not serve migration.k8s.io/v1alpha1: install svm's CRDs first (kubectl apply -k config/crd)"

// TestControllerOutOfClusterLeaseInDefault runs svm controller with the
// test's kubeconfig, whose context names no namespace: as kubectl would, it
// takes default, holds its lease there, says so, and executes a migration.
func TestControllerOutOfClusterLeaseInDefault(t *testing.T) {
	t.Parallel()
	const n = 300
	env, before := setup(t, n)
	svm := env.StartSVM(t, workstationArgs...)
	env.CreateMigration(t, "widgets", framework.Widgets)
	env.WaitMigrationSucceeded(t, "widgets", time.Minute)
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	env.ExpectUnchanged(t, framework.Widgets, before)

	expectLeaseHeld(t, env, metav1.NamespaceDefault)
	log := string(svm.Log(t))
	if !strings.Contains(log, `"Leader election lease" lease="default/`+leaseName+`"`) || !strings.Contains(log, "names no namespace") {
		t.Errorf("svm did not log that its lease is in default because the context names no namespace:\n%s", log)
	}
}

// TestControllerOutOfClusterLeaseInContextNamespace gives svm controller a
// kubeconfig whose context names a namespace. While that namespace does not
// exist, svm exits at once saying so and naming --leader-election-namespace
// (the elector would otherwise log a failed create every two seconds);
// once it exists, svm holds its lease there, not in default, and executes a
// migration.
func TestControllerOutOfClusterLeaseInContextNamespace(t *testing.T) {
	t.Parallel()
	const n, namespace = 300, "svm-ops"
	env, _ := setup(t, n)
	cfg := env.CP.Kubeconfig()
	cfg.Contexts[cfg.CurrentContext].Namespace = namespace
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}

	framework.SVMBinary(t) // build it before the clock starts
	start := time.Now()
	code, _, stderr := framework.RunSVM(t, kubeconfig, 30*time.Second, workstationArgs...)
	took := time.Since(start)
	last := lastLine(stderr)
	if code != 1 || !strings.Contains(last, `namespace "svm-ops" does not exist`) || !strings.Contains(last, "--leader-election-namespace") {
		t.Errorf("without its namespace: exit code %d, last line %q; want 1 and a line naming the namespace and --leader-election-namespace\n%s", code, last, stderr)
	}
	if took > 15*time.Second {
		t.Errorf("took %s to give up on a missing namespace", took)
	}
	t.Logf("without the namespace, after %s: %s", took.Round(time.Millisecond), last)

	if err := env.Client.Create(framework.Context(t, time.Minute), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	svm := framework.StartSVMWithKubeconfig(t, kubeconfig, workstationArgs...)
	env.CreateMigration(t, "widgets", framework.Widgets)
	env.WaitMigrationSucceeded(t, "widgets", time.Minute)
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})

	expectLeaseHeld(t, env, namespace)
	err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: leaseName}, &coordinationv1.Lease{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a lease in default: %v, want none", err)
	}
	if log := string(svm.Log(t)); !strings.Contains(log, `lease="svm-ops/`+leaseName+`" why="the namespace of kubeconfig context`) {
		t.Errorf("svm did not log that its lease is in the context's namespace:\n%s", log)
	}
}

// TestControllerWaitsForItsCRDsToBeEstablished starts svm controller while
// its CRDs exist but are not Established, and shows that it says so in one
// line, waits, and once they are served executes a migration.
//
// After a plain Create a CRD is Established within milliseconds, too fast
// to start svm in between reliably. So the test holds establishment back
// the way the API server itself does: a decoy CRD in the same group claims
// svm's short names first, so the API server does not accept svm's CRDs'
// names and does not establish or serve them, for as long as the decoy
// lives. Deleting the decoy makes the API server accept the names and
// establish the CRDs, as after a fresh `kubectl apply`. svm sees exactly
// what it would see then: CRD objects that exist, not Established, not in
// discovery.
func TestControllerWaitsForItsCRDsToBeEstablished(t *testing.T) {
	t.Parallel()
	const n = 300
	env := framework.Start(t, controlplane.Options{})
	env.CreateWidgetCRD(t, "v1")
	env.CreateObjects(t, framework.WidgetResource, []string{"ns-a", "ns-b"}, n)
	env.SetStorage(t, framework.WidgetResource, "v2")

	ctx := framework.Context(t, time.Minute)
	crds := []*apiextensionsv1.CustomResourceDefinition{
		readCRD(t, "migration.k8s.io_storageversionmigrations.yaml"), readCRD(t, "migration.k8s.io_storagestates.yaml"),
	}
	decoy := decoyCRD(crds[0].Annotations)
	if err := env.Client.Create(ctx, decoy); err != nil {
		t.Fatal(err)
	}
	env.WaitEstablished(t, decoy.Name)
	for _, crd := range crds {
		if err := env.Client.Create(ctx, crd); err != nil {
			t.Fatal(err)
		}
	}
	// Settled: the API server has refused both CRDs' names.
	for _, crd := range crds {
		refused := framework.WaitFor(ctx, 30*time.Second, func() bool {
			return crdCondition(t, env, crd.Name, apiextensionsv1.NamesAccepted) == apiextensionsv1.ConditionFalse
		})
		if !refused || crdCondition(t, env, crd.Name, apiextensionsv1.Established) == apiextensionsv1.ConditionTrue {
			t.Fatalf("CRD %s: names accepted or established despite the decoy; the test would prove nothing", crd.Name)
		}
	}

	svm := env.StartSVM(t, framework.ControllerArgs("--trigger=false")...)
	const waiting = `"Waiting for svm's CRDs to be established and served"`
	if !framework.WaitFor(ctx, 30*time.Second, func() bool { return bytes.Contains(svm.Log(t), []byte(waiting)) }) {
		t.Fatalf("svm did not say it waits for its CRDs:\n%s", svm.Log(t))
	}
	// Still waiting a few seconds later, not failed.
	time.Sleep(3 * time.Second)
	if log := string(svm.Log(t)); strings.Contains(log, "svm: ") || !strings.Contains(log, "ShortNamesConflict") {
		t.Fatalf("svm gave up, or did not say why its CRDs are not served:\n%s", log)
	}

	if err := env.Client.Delete(ctx, decoy); err != nil {
		t.Fatal(err)
	}
	for _, crd := range crds {
		env.WaitEstablished(t, crd.Name)
	}
	env.CreateMigration(t, "widgets", framework.Widgets)
	env.WaitMigrationSucceeded(t, "widgets", time.Minute)
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})

	log := svm.Log(t)
	if got := bytes.Count(log, []byte(waiting)); got != 1 {
		t.Errorf("%d lines saying svm waits, want 1", got)
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, waiting) {
			t.Logf("svm: %s", line)
		}
	}
}

// TestControllerWithoutCRDsExitsAtOnce shows that CRDs that do not exist
// are not waited for: with none, or with one of the two, svm controller
// exits within seconds with the message that says what to install.
func TestControllerWithoutCRDsExitsAtOnce(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.CP.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	framework.SVMBinary(t) // build it before the clock starts
	run := func(t *testing.T, want string) {
		t.Helper()
		start := time.Now()
		code, _, stderr := framework.RunSVM(t, kubeconfig, 30*time.Second, framework.ControllerArgs("--trigger=false")...)
		took := time.Since(start)
		if last := lastLine(stderr); code != 1 || last != want {
			t.Errorf("exit code %d, last line %q; want 1 and %q\n%s", code, last, want, stderr)
		}
		if strings.Contains(stderr, "Waiting for svm's CRDs") || took > 10*time.Second {
			t.Errorf("waited (%s) for CRDs that do not exist:\n%s", took, stderr)
		}
		t.Logf("exited after %s", took.Round(time.Millisecond))
	}
	t.Run("no CRDs", func(t *testing.T) { run(t, missingCRDsMessage) })
	t.Run("one of two, not yet established", func(t *testing.T) {
		// The StorageStates' CRD exists (just created, perhaps not
		// established yet); the migrations' never will by waiting.
		if err := env.Client.Create(framework.Context(t, time.Minute), readCRD(t, "migration.k8s.io_storagestates.yaml")); err != nil {
			t.Fatal(err)
		}
		run(t, "svm: the server does not serve storageversionmigrations.migration.k8s.io: install svm's CRDs first (kubectl apply -k config/crd)")
	})
}

// decoyCRD is a CRD in svm's group that claims the short names of svm's
// CRDs, so that while it exists the API server accepts neither of theirs.
// It carries their annotations: a *.k8s.io group needs
// api-approved.kubernetes.io.
func decoyCRD(annotations map[string]string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "decoys." + migrationv1alpha1.GroupVersion.Group, Annotations: annotations},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: migrationv1alpha1.GroupVersion.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "decoys", Singular: "decoy", Kind: "Decoy", ListKind: "DecoyList",
				ShortNames: []string{"svmigration", "svmstate"},
			},
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
}

func readCRD(t *testing.T, file string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(framework.MustReadFile(t, filepath.Join(framework.CRDBasesDir(), file)), crd); err != nil {
		t.Fatalf("decode %s: %v", file, err)
	}
	return crd
}

func crdCondition(t *testing.T, env *framework.Env, name string, typ apiextensionsv1.CustomResourceDefinitionConditionType) apiextensionsv1.ConditionStatus {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: name}, crd); err != nil {
		t.Fatal(err)
	}
	for _, c := range crd.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return apiextensionsv1.ConditionUnknown
}

// expectLeaseHeld checks that svm's lease exists in namespace, held.
func expectLeaseHeld(t *testing.T, env *framework.Env, namespace string) {
	t.Helper()
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Namespace: namespace, Name: leaseName}, lease); err != nil {
		t.Errorf("the lease in %s: %v", namespace, err)
	} else if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("the lease in %s has no holder: %+v", namespace, lease.Spec)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
