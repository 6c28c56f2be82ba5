// Command demo shows svm's job end to end on a local control plane that it
// starts itself: it creates custom resources, flips their storage version,
// migrates them with `svm migrate`, and proves from etcd's raw bytes that
// every object is now stored in the new version, with unchanged content.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"sort"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/svm-project/svm/internal/cli"
	"github.com/svm-project/svm/internal/controlplane"
	"github.com/svm-project/svm/internal/etcdvalue"
)

var widgets = schema.GroupVersionResource{Group: "demo.svm.io", Version: "v1", Resource: "widgets"}

func main() {
	binDir := flag.String("bin-dir", "", "directory holding kube-apiserver and etcd")
	objects := flag.Int("objects", 2000, "number of custom resources to create")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *binDir, *objects); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, binDir string, n int) error {
	step("starting a local control plane (etcd + kube-apiserver)")
	cp, err := controlplane.Start(ctx, controlplane.Options{BinDir: binDir})
	if err != nil {
		return err
	}
	defer cp.Stop()
	cfg := cp.RESTConfig()
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ext := apiextensionsclient.NewForConfigOrDie(cfg)
	etcd, err := cp.EtcdClient()
	if err != nil {
		return err
	}
	defer etcd.Close()
	fmt.Printf("  API server %s, etcd %s\n", cp.APIServerURL, cp.EtcdURL)

	step("creating CRD widgets.demo.svm.io with versions v1 (storage) and v2")
	if err := createCRD(ctx, ext); err != nil {
		return err
	}
	if err := waitServed(ctx, kube.Discovery()); err != nil {
		return err
	}
	step(fmt.Sprintf("creating %d widgets", n))
	demoNamespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, demoNamespace, metav1.CreateOptions{}); err != nil {
		return err
	}
	for i := range n {
		w := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "demo.svm.io/v1", "kind": "Widget",
			"metadata": map[string]any{"name": fmt.Sprintf("widget-%05d", i)},
			"spec":     map[string]any{"size": int64(i)},
		}}
		if _, err := dyn.Resource(widgets).Namespace("demo").Create(ctx, w, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := report(ctx, etcd); err != nil {
		return err
	}

	before, err := storageVersionHash(kube.Discovery())
	if err != nil {
		return err
	}
	step("flipping the storage version to v2")
	if err := flipStorage(ctx, ext); err != nil {
		return err
	}
	var after string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		after, err = storageVersionHash(kube.Discovery())
		return err == nil && after != before, nil
	})
	if err != nil {
		return fmt.Errorf("storage version hash did not change: %w", err)
	}
	fmt.Printf("  discovery storageVersionHash %s -> %s\n", before, after)
	fmt.Println("  the API server now writes v2, but nothing has rewritten the objects already stored:")
	if err := report(ctx, etcd); err != nil {
		return err
	}
	contentBefore, err := contents(ctx, dyn)
	if err != nil {
		return err
	}

	step("svm migrate widgets.demo.svm.io")
	kubeconfig := filepath.Join(cp.Dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	if code := cli.Main([]string{"migrate", "--kubeconfig", kubeconfig, "widgets.demo.svm.io"}, os.Stdout, os.Stderr); code != 0 {
		return fmt.Errorf("svm migrate exited %d", code)
	}

	step("proof")
	if err := report(ctx, etcd); err != nil {
		return err
	}
	contentAfter, err := contents(ctx, dyn)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(contentBefore, contentAfter) {
		return errors.New("object contents changed during the migration")
	}
	fmt.Printf("  all %d objects have the same content as before the migration (metadata except resourceVersion, spec)\n", len(contentAfter))
	return nil
}

// contents maps every widget to what a migration must not change.
func contents(ctx context.Context, dyn dynamic.Interface) (map[string]any, error) {
	list, err := dyn.Resource(widgets).Namespace("demo").List(ctx, metav1.ListOptions{})
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

func step(s string) { fmt.Printf("\n==> %s\n", s) }

// report prints how many stored widgets etcd holds in each apiVersion.
func report(ctx context.Context, etcd *clientv3.Client) error {
	resp, err := etcd.Get(ctx, "/registry/demo.svm.io/widgets/", clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("read etcd: %w", err)
	}
	counts := map[string]int{}
	for _, kv := range resp.Kvs {
		v, err := etcdvalue.Inspect(kv.Value)
		if err != nil {
			return fmt.Errorf("%s: %w", kv.Key, err)
		}
		counts[v.APIVersion]++
	}
	versions := make([]string, 0, len(counts))
	for v := range counts {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	fmt.Println("  raw values in etcd under /registry/demo.svm.io/widgets/:")
	for _, v := range versions {
		fmt.Printf("    %-16s %d objects\n", v, counts[v])
	}
	return nil
}

func createCRD(ctx context.Context, ext apiextensionsclient.Interface) error {
	preserve := true
	schemaProps := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", XPreserveUnknownFields: &preserve}},
	}}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.demo.svm.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "demo.svm.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schemaProps},
				{Name: "v2", Served: true, Storage: false, Schema: schemaProps},
			},
		},
	}
	_, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
	return err
}

func flipStorage(ctx context.Context, ext apiextensionsclient.Interface) error {
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "widgets.demo.svm.io", metav1.GetOptions{})
	if err != nil {
		return err
	}
	for i := range crd.Spec.Versions {
		crd.Spec.Versions[i].Storage = crd.Spec.Versions[i].Name == "v2"
	}
	_, err = ext.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{})
	return err
}

func waitServed(ctx context.Context, disc discovery.DiscoveryInterface) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := storageVersionHash(disc)
		return err == nil, nil
	})
}

func storageVersionHash(disc discovery.DiscoveryInterface) (string, error) {
	list, err := disc.ServerResourcesForGroupVersion(widgets.GroupVersion().String())
	if err != nil {
		return "", err
	}
	for _, r := range list.APIResources {
		if r.Name == widgets.Resource {
			return r.StorageVersionHash, nil
		}
	}
	return "", fmt.Errorf("%s not served", widgets)
}
