package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/etcdvalue"
	"github.com/svm-project/svm/internal/scheme"
	"github.com/svm-project/svm/internal/trigger"
	"github.com/svm-project/svm/test/controlplane"
)

var widgets = schema.GroupVersionResource{Group: "demo.svm.io", Version: "v1", Resource: "widgets"}

const (
	crdName   = "widgets.demo.svm.io"
	namespace = "demo"
	// etcdPrefix is where the API server stores widgets.
	etcdPrefix = "/registry/demo.svm.io/widgets/"
	// requestTimeout is the demo API server's --request-timeout, and
	// drainMargin svm's --crd-drain-margin for it: twice it. Writes an API
	// server accepted under a CRD's old storage version may land that long
	// after the change; the defaults (1 minute, and 2 minutes) would make
	// the demo wait two minutes for writes nobody sends here.
	requestTimeout = 5 * time.Second
	drainMargin    = 2 * requestTimeout
	// settleDelay is svm's --crd-settle-delay: one API server here.
	settleDelay = 2 * time.Second
)

// demo holds the clients of one run.
type demo struct {
	o    options
	cp   *controlplane.ControlPlane
	c    client.Client
	dyn  dynamic.Interface
	disc discovery.DiscoveryInterface
	etcd *clientv3.Client
}

func run(ctx context.Context, o options) error {
	d := &demo{o: o}
	d.step("starting a local control plane (etcd + kube-apiserver)")
	cp, err := controlplane.Start(ctx, controlplane.Options{BinDir: o.BinDir, APIServerFlags: []string{"--request-timeout=" + requestTimeout.String()}})
	if err != nil {
		return err
	}
	defer cp.Stop()
	d.cp = cp
	if err := d.connect(); err != nil {
		return err
	}
	defer d.etcd.Close()
	d.say("API server %s, etcd %s", cp.APIServerURL, cp.EtcdURL)

	d.step("installing svm's CRDs (in a cluster: kubectl apply -k config/default)")
	if err := d.installCRDs(ctx); err != nil {
		return err
	}
	d.step("creating CRD " + crdName + " with versions v1 (storage) and v2")
	if err := d.createCRD(ctx); err != nil {
		return err
	}
	d.step(fmt.Sprintf("creating %d widgets in v1 with server-side apply (as Helm, Argo CD and Flux do)", o.Objects))
	if err := d.createWidgets(ctx); err != nil {
		return err
	}
	if _, err := d.report(ctx); err != nil {
		return err
	}

	d.step("starting svm controller")
	svm, err := d.startSVM(ctx)
	if err != nil {
		return err
	}
	defer svm.stop()
	d.say("svm's first pass records the storage version of every resource it can migrate")
	d.say("and migrates each once, since it cannot know what was stored before it came")
	v1Hash, err := d.waitMigrated(ctx, svm)
	if err != nil {
		return err
	}
	before, err := d.contents(ctx)
	if err != nil {
		return err
	}

	d.step("flipping the storage version of " + crdName + " to v2")
	if err := d.flipStorage(ctx); err != nil {
		return err
	}
	flipped := time.Now()
	v2Hash, err := d.waitHashChange(ctx, v1Hash)
	if err != nil {
		return err
	}
	d.say("discovery's storageVersionHash: %s -> %s", v1Hash, v2Hash)
	d.say("the API server now writes v2, but the objects already stored stay as they are:")
	if _, err := d.report(ctx); err != nil {
		return err
	}

	d.step("svm notices (it watches CRDs: seconds, whatever --trigger-interval is)")
	if err := d.waitNoticed(ctx, svm, v2Hash, flipped); err != nil {
		return err
	}
	d.say("it migrates once every API server has seen the change (--crd-settle-delay, %s here) and any write", settleDelay)
	d.say("they accepted under v1 has landed (--crd-drain-margin, %s here: twice this API server's --request-timeout)", drainMargin)
	m, err := d.waitMigrationFor(ctx, svm, v2Hash)
	if err != nil {
		return err
	}
	if err := d.watch(ctx, svm, m.Name); err != nil {
		return err
	}
	if _, err := d.waitMigrated(ctx, svm); err != nil {
		return err
	}
	if err := d.waitStoredVersions(ctx); err != nil {
		return err
	}

	d.step("proof, from etcd's raw bytes")
	counts, err := d.report(ctx)
	if err != nil {
		return err
	}
	if want := map[string]int{"demo.svm.io/v2": o.Objects}; !maps.Equal(counts, want) {
		return fmt.Errorf("etcd holds %v, want %v", counts, want)
	}
	after, err := d.contents(ctx)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(before, after) {
		return errors.New("object contents changed during the migration")
	}
	d.say("all %d widgets have the same content as before (everything but resourceVersion and managed fields)", len(after))
	named, err := d.managedFieldsVersions(ctx)
	if err != nil {
		return err
	}
	d.say("the apiVersions their managedFields entries name, in etcd: %v", named)
	d.say("(svm moved them off v1 in the same writes: left naming v1, every server-side apply would fail once v1 is removed)")

	d.step("svm retire widgets.v1.demo.svm.io --unserve --quiet-for 5s")
	d.say("one last check before v1 goes: no API server may have answered a request for it for 5s")
	if err := d.retire(ctx, "widgets.v1.demo.svm.io", "--unserve", "--quiet-for", "5s", "--crd-drain-margin", drainMargin.String()); err != nil {
		return err
	}
	if err := d.dropV1(ctx); err != nil {
		return err
	}
	d.say("v1 is no longer stored, named in managedFields nor served, so the API server accepts removing it from the CRD")
	if err := d.applyAfterRemoval(ctx); err != nil {
		return err
	}

	d.step("stopping svm and the control plane")
	if err := svm.stop(); err != nil {
		return err
	}
	d.say("svm stopped cleanly; its log: %s", svm.logPath)
	return nil
}

func (d *demo) step(s string) { fmt.Fprintf(d.o.Out, "\n==> %s\n", s) }

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.o.Out, "    "+format+"\n", args...)
}

func (d *demo) connect() error {
	cfg := d.cp.RESTConfig()
	var err error
	if d.c, err = client.New(cfg, client.Options{Scheme: scheme.Scheme}); err != nil {
		return err
	}
	if d.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return err
	}
	if d.disc, err = discovery.NewDiscoveryClientForConfig(cfg); err != nil {
		return err
	}
	d.etcd, err = d.cp.EtcdClient()
	return err
}

// poll calls cond every 200ms until it is done, fails, or timeout passes;
// what is waited for is named in the error.
func poll(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, cond); err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

func (d *demo) installCRDs(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(d.o.CRDDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s (run the demo from the repository root, or pass --crd-dir)", d.o.CRDDir)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return fmt.Errorf("decode %s: %w", f, err)
		}
		if err := d.c.Create(ctx, crd); err != nil {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
		if err := d.waitServed(ctx, schema.GroupVersion{Group: crd.Spec.Group, Version: crd.Spec.Versions[0].Name}, crd.Spec.Names.Plural); err != nil {
			return err
		}
		d.say("%s", crd.Name)
	}
	return nil
}

func (d *demo) createCRD(ctx context.Context) error {
	schemaProps := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", XPreserveUnknownFields: ptr(true)}},
	}}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: crdName},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: widgets.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schemaProps},
				{Name: "v2", Served: true, Storage: false, Schema: schemaProps},
			},
		},
	}
	if err := d.c.Create(ctx, crd); err != nil {
		return err
	}
	return d.waitServed(ctx, widgets.GroupVersion(), widgets.Resource)
}

// createWidgets creates the objects with a few concurrent writers: the
// setup should not be the slow part of the demo.
func (d *demo) createWidgets(ctx context.Context) error {
	if err := d.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	const writers = 8
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := w; i < d.o.Objects; i += writers {
				name := fmt.Sprintf("widget-%05d", i)
				obj := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "demo.svm.io/v1", "kind": "Widget",
					"metadata": map[string]any{"name": name, "namespace": namespace},
					"spec":     map[string]any{"size": int64(i), "color": []any{"red", "green", "blue"}[i%3]},
				}}
				if _, err := d.dyn.Resource(widgets).Namespace(namespace).Apply(ctx, name, obj, metav1.ApplyOptions{FieldManager: "demo-deployer"}); err != nil {
					errs <- fmt.Errorf("create widget: %w", err)
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range writers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// report prints how many stored widgets etcd holds in each apiVersion,
// read from the raw values, and returns the counts.
func (d *demo) report(ctx context.Context) (map[string]int, error) {
	return d.census(ctx, etcdPrefix, "raw values in etcd under %s:", "objects", func(raw []byte) (string, error) {
		v, err := etcdvalue.Inspect(raw)
		return v.APIVersion, err
	})
}

// census counts the raw values etcd holds under prefix by what label says
// of each, prints the counts under the heading (of prefix), each followed
// by unit, and returns them.
func (d *demo) census(ctx context.Context, prefix, heading, unit string, label func(raw []byte) (string, error)) (map[string]int, error) {
	resp, err := d.etcd.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read etcd: %w", err)
	}
	counts := map[string]int{}
	for _, kv := range resp.Kvs {
		l, err := label(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		counts[l]++
	}
	d.say(heading, prefix)
	for _, l := range slices.Sorted(maps.Keys(counts)) {
		d.say("  %s: %d %s", l, counts[l], unit)
	}
	return counts, nil
}

// contents maps every widget to what a migration must not change.
func (d *demo) contents(ctx context.Context) (map[string]any, error) {
	list, err := d.dyn.Resource(widgets).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(list.Items))
	for _, item := range list.Items {
		obj := item.DeepCopy().Object
		unstructured.RemoveNestedField(obj, "metadata", "resourceVersion")
		unstructured.RemoveNestedField(obj, "metadata", "managedFields")
		out[item.GetName()] = obj
	}
	return out, nil
}

func (d *demo) getCRD(ctx context.Context) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	return crd, d.c.Get(ctx, client.ObjectKey{Name: crdName}, crd)
}

func (d *demo) flipStorage(ctx context.Context) error {
	crd, err := d.getCRD(ctx)
	if err != nil {
		return err
	}
	for i := range crd.Spec.Versions {
		crd.Spec.Versions[i].Storage = crd.Spec.Versions[i].Name == "v2"
	}
	return d.c.Update(ctx, crd)
}

// managedFieldsVersions counts, over the widgets' raw values in etcd, the
// apiVersions their managedFields entries name.
func (d *demo) managedFieldsVersions(ctx context.Context) (map[string]int, error) {
	resp, err := d.etcd.Get(ctx, etcdPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read etcd: %w", err)
	}
	named := map[string]int{}
	for _, kv := range resp.Kvs {
		var obj struct {
			Metadata struct {
				ManagedFields []metav1.ManagedFieldsEntry `json:"managedFields"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(kv.Value, &obj); err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		for _, e := range obj.Metadata.ManagedFields {
			named[e.APIVersion]++
		}
	}
	return named, nil
}

// retire runs svm retire with args and shows what it says.
func (d *demo) retire(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, d.svmBinary(), append([]string{"retire", "--kubeconfig", filepath.Join(d.cp.Dir, "svm.kubeconfig")}, args...)...).CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		d.say("  %s", line)
	}
	if err != nil {
		return fmt.Errorf("svm retire: %w", err)
	}
	return nil
}

// applyAfterRemoval applies a field to a widget through v2 as a manager
// new to it: server-side apply still works once v1 is gone.
func (d *demo) applyAfterRemoval(ctx context.Context) error {
	v2 := widgets.GroupResource().WithVersion("v2")
	if err := poll(ctx, time.Minute, "v1 no longer served", func(context.Context) (bool, error) {
		_, err := d.disc.ServerResourcesForGroupVersion("demo.svm.io/v1")
		return err != nil, nil
	}); err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.svm.io/v2", "kind": "Widget",
		"metadata": map[string]any{"name": "widget-00000", "namespace": namespace, "labels": map[string]any{"reviewed": "yes"}},
	}}
	if _, err := d.dyn.Resource(v2).Namespace(namespace).Apply(ctx, "widget-00000", obj, metav1.ApplyOptions{FieldManager: "demo-reviewer"}); err != nil {
		return fmt.Errorf("server-side apply after removing v1: %w", err)
	}
	d.say("server-side apply through v2 by a new manager still works on widget-00000 with v1 gone")
	return nil
}

// dropV1 removes v1 from the CRD, which the API server refuses while
// status.storedVersions still lists it.
func (d *demo) dropV1(ctx context.Context) error {
	crd, err := d.getCRD(ctx)
	if err != nil {
		return err
	}
	crd.Spec.Versions = slices.DeleteFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == "v1" })
	if err := d.c.Update(ctx, crd); err != nil {
		return fmt.Errorf("remove v1 from the CRD: %w", err)
	}
	return nil
}

// waitStoredVersions waits until svm has pruned the CRD's storedVersions.
func (d *demo) waitStoredVersions(ctx context.Context) error {
	var stored []string
	err := poll(ctx, time.Minute, "svm to prune the CRD's storedVersions", func(ctx context.Context) (bool, error) {
		crd, err := d.getCRD(ctx)
		if err != nil {
			return false, err
		}
		stored = crd.Status.StoredVersions
		return slices.Equal(stored, []string{"v2"}), nil
	})
	if err != nil {
		return fmt.Errorf("%w (storedVersions %v)", err, stored)
	}
	d.say("CRD %s status.storedVersions: [v1 v2] -> %v, pruned by svm", crdName, stored)
	return nil
}

func (d *demo) waitServed(ctx context.Context, gv schema.GroupVersion, resource string) error {
	return poll(ctx, time.Minute, resource+" to be served", func(context.Context) (bool, error) {
		_, err := d.hash(gv, resource)
		return err == nil, nil
	})
}

func (d *demo) hash(gv schema.GroupVersion, resource string) (string, error) {
	list, err := d.disc.ServerResourcesForGroupVersion(gv.String())
	if err != nil {
		return "", err
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return r.StorageVersionHash, nil
		}
	}
	return "", fmt.Errorf("%s not served", resource)
}

func (d *demo) waitHashChange(ctx context.Context, old string) (string, error) {
	var now string
	err := poll(ctx, time.Minute, "discovery to report the new storage version", func(context.Context) (bool, error) {
		h, err := d.hash(widgets.GroupVersion(), widgets.Resource)
		now = h
		return err == nil && h != old, nil
	})
	return now, err
}

// stateName is the name of the widgets' StorageState.
var stateName = migrationv1alpha1.StorageStateName(migrationv1alpha1.GroupResource{Group: widgets.Group, Resource: widgets.Resource})

// waitMigrated waits until the widgets' StorageState says that everything
// stored is in the current storage version, and returns that version's
// hash.
func (d *demo) waitMigrated(ctx context.Context, svm *svmProcess) (string, error) {
	var st migrationv1alpha1.StorageState
	err := poll(ctx, 2*time.Minute, "StorageState "+stateName+" to show a completed migration", func(ctx context.Context) (bool, error) {
		if err := svm.exited(); err != nil {
			return false, err
		}
		if err := d.c.Get(ctx, client.ObjectKey{Name: stateName}, &st); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		cur := st.Status.CurrentStorageVersionHash
		return cur != "" && slices.Equal(st.Status.PersistedStorageVersionHashes, []string{cur}), nil
	})
	if err != nil {
		return "", err
	}
	d.say("StorageState %s: persistedStorageVersionHashes %v (everything stored is in the current version)", stateName, st.Status.PersistedStorageVersionHashes)
	return st.Status.CurrentStorageVersionHash, nil
}

// waitNoticed waits for svm to record hash, the storage version the CRD
// was flipped to at flipped, on its StorageState.
func (d *demo) waitNoticed(ctx context.Context, svm *svmProcess, hash string, flipped time.Time) error {
	err := poll(ctx, time.Minute, "StorageState "+stateName+" to record "+hash, func(ctx context.Context) (bool, error) {
		if err := svm.exited(); err != nil {
			return false, err
		}
		var st migrationv1alpha1.StorageState
		if err := d.c.Get(ctx, client.ObjectKey{Name: stateName}, &st); err != nil {
			return false, err
		}
		return st.Status.CurrentStorageVersionHash == hash, nil
	})
	if err != nil {
		return err
	}
	d.say("StorageState %s records storage version hash %s %s after the flip", stateName, hash, time.Since(flipped).Round(100*time.Millisecond))
	return nil
}

// waitMigrationFor waits for the migration svm creates for the hash.
func (d *demo) waitMigrationFor(ctx context.Context, svm *svmProcess, hash string) (*migrationv1alpha1.StorageVersionMigration, error) {
	var found *migrationv1alpha1.StorageVersionMigration
	err := poll(ctx, time.Minute, "svm to create a migration for "+hash, func(ctx context.Context) (bool, error) {
		if err := svm.exited(); err != nil {
			return false, err
		}
		var list migrationv1alpha1.StorageVersionMigrationList
		if err := d.c.List(ctx, &list, client.MatchingLabels{trigger.CreatedByLabel: trigger.CreatedByValue}); err != nil {
			return false, err
		}
		for i, m := range list.Items {
			if m.Annotations[trigger.TargetHashAnnotation] == hash && m.Spec.Resource.Resource == widgets.Resource {
				found = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	var st migrationv1alpha1.StorageState
	if err := d.c.Get(ctx, client.ObjectKey{Name: stateName}, &st); err != nil {
		return nil, err
	}
	d.say("StorageState %s: persistedStorageVersionHashes %v (v1 and v2 may both be stored)", stateName, st.Status.PersistedStorageVersionHashes)
	d.say("svm created StorageVersionMigration %s", found.Name)
	return found, nil
}

// watch shows the migration's progress from its status until it ends.
func (d *demo) watch(ctx context.Context, svm *svmProcess, name string) error {
	bar := newProgressBar(d.o.Out, d.o.Terminal)
	var m migrationv1alpha1.StorageVersionMigration
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := svm.exited(); err != nil {
			return false, err
		}
		if err := d.c.Get(ctx, client.ObjectKey{Name: name}, &m); err != nil {
			return false, err
		}
		bar.show(&m)
		return m.IsFinished(), nil
	})
	bar.done(&m)
	if err != nil {
		return fmt.Errorf("waiting for migration %s: %w", name, err)
	}
	if !m.HasCondition(migrationv1alpha1.MigrationSucceeded) {
		return fmt.Errorf("migration %s did not succeed: %+v", name, m.Status.Conditions)
	}
	return nil
}

// svmProcess is `svm controller` running beside the demo.
type svmProcess struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

// svmBinary is the svm binary the demo runs.
func (d *demo) svmBinary() string {
	if d.o.SVM != "" {
		return d.o.SVM
	}
	return d.cp.BinPath("svm")
}

// startSVM starts svm controller with the demo's flags and extra.
func (d *demo) startSVM(ctx context.Context, extra ...string) (*svmProcess, error) {
	bin := d.svmBinary()
	kubeconfig := filepath.Join(d.cp.Dir, "svm.kubeconfig")
	if err := d.cp.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	logFile, err := os.CreateTemp(d.o.LogDir, "svm-demo-*.log")
	if err != nil {
		return nil, err
	}
	args := []string{"controller", "--kubeconfig", kubeconfig,
		"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--max-parallel=4", "--crd-settle-delay", settleDelay.String(), "--crd-drain-margin", drainMargin.String(),
		"--qps", fmt.Sprint(d.o.QPS), "--chunk-size=100"}
	args = append(args, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// svm must not outlive the demo, however the demo ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w (build it with make build)", bin, err)
	}
	p := &svmProcess{cmd: cmd, logPath: logFile.Name(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	d.say("svm controller %s", strings.Join(args[3:], " "))
	d.say("(log: %s)", p.logPath)
	return p, nil
}

// exited is an error once svm has exited on its own.
func (p *svmProcess) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("svm exited early (%v); see %s", p.err, p.logPath)
	default:
		return nil
	}
}

// stop sends SIGTERM, which drains svm, and waits for it to exit.
func (p *svmProcess) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("svm exited with %v; see %s", p.err, p.logPath)
		}
		return nil
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("svm did not stop within a minute of SIGTERM; see %s", p.logPath)
	}
}

func ptr[T any](v T) *T { return &v }
