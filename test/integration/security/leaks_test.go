package security_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestNoObjectContentsInOutputOrEvents fills Secrets, ConfigMaps and
// custom resources with unique random values (in their data and their
// annotations), rotates the encryption key twice, and has svm rewrite them
// each time: once with `svm migrate`, once with `svm controller` and its
// trigger. One widget is refused by an admission webhook, so the failure
// paths (failed objects, warning events, a Failed migration) run too.
// Then none of the values, nor their base64, may appear in anything svm
// printed or logged, in any Event, or in svm's migrations and
// StorageStates.
func TestNoObjectContentsInOutputOrEvents(t *testing.T) {
	t.Parallel()
	cfgDir := t.TempDir()
	keys := []framework.EncryptionKey{
		framework.NewEncryptionKey(t, "first"), framework.NewEncryptionKey(t, "second"), framework.NewEncryptionKey(t, "third"),
	}
	env := framework.Start(t, controlplane.Options{APIServerFlags: []string{framework.WriteEncryptionConfig(t, cfgDir, keys[0])}})
	install(t, env)
	env.CreateWidgetCRD(t, "v1")
	namespaces := []string{"team-a", "team-b"}
	for _, ns := range namespaces {
		env.CreateNamespace(t, ns)
	}

	const perKind = 20
	var markers []string
	mark := func() string {
		m := framework.NewMarker(t)
		markers = append(markers, m)
		return m
	}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	for i := range perKind {
		ns := namespaces[i%len(namespaces)]
		meta := func(name string) metav1.ObjectMeta {
			return metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{"example.com/note": mark()}}
		}
		secret := &corev1.Secret{ObjectMeta: meta(fmt.Sprintf("secret-%02d", i)), Data: map[string][]byte{"password": []byte(mark())}}
		cm := &corev1.ConfigMap{ObjectMeta: meta(fmt.Sprintf("config-%02d", i)), Data: map[string]string{"value": mark()}}
		widget := framework.Widget("v1", fmt.Sprintf("widget-%02d", i), i)
		widget.SetNamespace(ns)
		widget.SetAnnotations(map[string]string{"example.com/note": mark()})
		if err := unstructured.SetNestedField(widget.Object, mark(), "data", "payload"); err != nil {
			t.Fatal(err)
		}
		for _, obj := range []client.Object{secret, cm} {
			if err := env.Client.Create(ctx(t), obj); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := env.Dynamic.Resource(framework.Widgets).Namespace(ns).Create(ctx(t), widget, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The scan must be able to fail: the values are there to be found in
	// the objects themselves, as served.
	for _, gvr := range []schema.GroupVersionResource{secrets, configMaps, framework.Widgets} {
		raw, err := json.Marshal(env.List(t, gvr))
		if err != nil {
			t.Fatal(err)
		}
		if len(framework.FindLeaks(gvr.Resource, string(raw), markers)) < 2*perKind {
			t.Fatalf("the markers cannot be found in the %s themselves; the scan would prove nothing", gvr.Resource)
		}
	}
	denied := namespaces[0] + "/widget-00"
	framework.StartDenyingWebhook(t, env, framework.WidgetResource, map[string]bool{denied: true})

	secretsStored := func() map[string]int {
		all := map[string]int{}
		for _, ns := range namespaces {
			for k, v := range env.StoredVersions(t, "/registry/secrets/"+ns+"/") {
				all[k] += v
			}
		}
		return all
	}
	rotate := func(writer int) {
		t.Helper()
		// The new key writes; all older ones still read.
		ring := slices.Clone(keys[:writer+1])
		slices.Reverse(ring)
		env.CP.SetAPIServerFlags(framework.WriteEncryptionConfig(t, cfgDir, ring...))
		if err := env.CP.RestartAPIServer(framework.Context(t, 2*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	admin := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.CP.WriteKubeconfig(admin); err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{} // what svm printed, by where it came from

	// Rotation one: `svm migrate`.
	rotate(1)
	code, stdout, stderr := framework.RunSVM(t, admin, 3*time.Minute, "migrate", "secrets", "configmaps", "widgets.example.com")
	outputs["svm migrate stdout"], outputs["svm migrate stderr"] = stdout, stderr
	if code == 0 || !strings.Contains(stdout, "failed "+denied) {
		t.Errorf("svm migrate: exit %d, want 1 with %s failed\nstdout:\n%s\nstderr:\n%s", code, denied, stdout, stderr)
	}
	if diff := cmp.Diff(map[string]int{"encrypted:aescbc:second": perKind}, secretsStored()); diff != "" {
		t.Errorf("Secrets after svm migrate (-want +got):\n%s", diff)
	}

	// The API server counts requests since it started, and is restarted
	// next.
	writes := func() int {
		return env.ServerWrites(t, "secrets") + env.ServerWrites(t, "configmaps") + env.ServerWrites(t, "widgets")
	}
	migrateWrites := writes()

	// Rotation two: `svm controller`, as its ServiceAccount, with the
	// trigger migrating every resource.
	rotate(2)
	controller := framework.StartSVMWithKubeconfig(t, env.ServiceAccountKubeconfig(t, installNamespace, controllerSA),
		framework.ControllerArgs("--leader-elect", "--leader-election-namespace", installNamespace, "--trigger-interval", "2s", "--max-parallel", "4", "--trigger-retry-delay", "10m")...)
	var list migrationv1alpha1.StorageVersionMigrationList
	finished := framework.WaitFor(t.Context(), 3*time.Minute, func() bool {
		if err := env.Client.List(t.Context(), &list); err != nil {
			return false
		}
		done := map[string]bool{}
		for i := range list.Items {
			if m := &list.Items[i]; m.IsFinished() {
				done[m.Spec.Resource.Resource] = true
			}
		}
		return done["secrets"] && done["configmaps"] && done["widgets"] &&
			!slices.ContainsFunc(list.Items, func(m migrationv1alpha1.StorageVersionMigration) bool { return !m.IsFinished() })
	})
	if !finished {
		t.Fatalf("the controller's migrations did not all finish: %d migrations", len(list.Items))
	}
	if diff := cmp.Diff(map[string]int{"encrypted:aescbc:third": perKind}, secretsStored()); diff != "" {
		t.Errorf("Secrets after svm controller (-want +got):\n%s", diff)
	}
	for _, args := range [][]string{{"status"}, {"status", "-o", "json"}} {
		code, stdout, stderr := framework.RunSVM(t, admin, time.Minute, args...)
		if code != 0 || !strings.Contains(stdout, "widgets") {
			t.Errorf("svm %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
		outputs[fmt.Sprintf("svm %v stdout", args)], outputs[fmt.Sprintf("svm %v stderr", args)] = stdout, stderr
	}
	if !controller.Stop(time.Minute) {
		t.Error("svm controller did not stop within a minute")
	}
	outputs["svm controller log"] = string(controller.Log(t))

	// The failure paths ran: the denied widget is named, not shown.
	widgetsFailed := slices.ContainsFunc(list.Items, func(m migrationv1alpha1.StorageVersionMigration) bool {
		return m.Spec.Resource.Resource == "widgets" && framework.Failed(&m) && framework.Condition(&m, migrationv1alpha1.MigrationFailed).Reason == "ObjectsFailed" &&
			slices.ContainsFunc(m.Status.FailedObjects, func(f migrationv1alpha1.FailedObject) bool { return f.Namespace+"/"+f.Name == denied })
	})
	if !widgetsFailed {
		t.Errorf("no widgets migration failed naming %s; the failure paths did not run", denied)
	}

	events, err := env.Kube.CoreV1().Events(metav1.NamespaceAll).List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) == 0 {
		t.Fatal("no Events at all; the scan would prove nothing")
	}
	var states migrationv1alpha1.StorageStateList
	if err := env.Client.List(ctx(t), &states); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.List(ctx(t), &list); err != nil {
		t.Fatal(err)
	}
	for where, obj := range map[string]any{"Events": events, "StorageVersionMigrations": &list, "StorageStates": &states} {
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		outputs[where] = string(raw)
	}
	scanned := 0
	for where, text := range outputs {
		scanned += len(text)
		for _, leak := range framework.FindLeaks(where, text, markers) {
			t.Errorf("%s holds an object's content (%q as %q)", leak.Where, leak.Marker, leak.Form)
		}
	}
	t.Logf("scanned %d bytes of svm output, %d Events, %d migrations and %d StorageStates for %d values",
		scanned, len(events.Items), len(list.Items), len(states.Items), len(markers))
	framework.Scenario{
		Name: "no object contents in output or events", Objects: 3 * perKind,
		Writes: migrateWrites + writes(), Retries: -1, Verified: !t.Failed(),
	}.Report(t)
}
