package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/svm-project/svm/internal/scheme"
	"github.com/svm-project/svm/test/controlplane"
)

// Env is a running control plane with clients for it.
type Env struct {
	CP        *controlplane.ControlPlane
	Config    *rest.Config
	Client    client.Client
	Kube      kubernetes.Interface
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
	Etcd      *clientv3.Client
}

// Scheme knows the built-in types, CRDs and svm's API.
var Scheme = scheme.Scheme

var logOnce sync.Once

// Codecs serialize the types in Scheme.
var Codecs = serializer.NewCodecFactory(Scheme)

// Start starts a control plane of t's own and builds clients for it; it
// stops when t ends. Tests that restart or break the control plane, or
// watch every object of a kind, need one of their own; the others share
// one with Shared.
func Start(t testing.TB, opts controlplane.Options) *Env {
	t.Helper()
	env, err := newEnv(controlplane.ForTest(t, opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Etcd.Close() })
	return env
}

// newEnv builds the clients of a running control plane.
func newEnv(cp *controlplane.ControlPlane) (*Env, error) {
	// The clients log nothing the tests read; say so once, or
	// controller-runtime complains on first use.
	logOnce.Do(func() { log.SetLogger(logr.Discard()) })
	env := &Env{CP: cp, Config: cp.RESTConfig()}
	var err error
	if env.Client, err = client.New(env.Config, client.Options{Scheme: Scheme}); err != nil {
		return nil, fmt.Errorf("build client: %w", err)
	}
	if env.Kube, err = kubernetes.NewForConfig(env.Config); err != nil {
		return nil, fmt.Errorf("build clientset: %w", err)
	}
	if env.Dynamic, err = dynamic.NewForConfig(env.Config); err != nil {
		return nil, fmt.Errorf("build dynamic client: %w", err)
	}
	env.Discovery = env.Kube.Discovery()
	if env.Etcd, err = cp.EtcdClient(); err != nil {
		return nil, err
	}
	return env, nil
}

// Context returns a context that ends with the test or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// RepoRoot is the root of the svm repository, found from this file's path.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// CRDBasesDir is where controller-gen writes svm's CRDs.
func CRDBasesDir() string { return filepath.Join(RepoRoot(), "config", "crd", "bases") }

// MustReadFile reads a file or fails the test.
func MustReadFile(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return data
}

// StartWithWidgets starts a control plane of t's own with opts, installs
// svm's CRDs and the widgets' CRD (v1 stored), and creates n widgets over
// namespaces. It is where a test that runs `svm controller` starts: the
// controller acts on every migration and StorageState in the cluster, so
// it cannot share one.
func StartWithWidgets(t testing.TB, opts controlplane.Options, namespaces []string, n int) *Env {
	t.Helper()
	env := Start(t, opts)
	env.InstallCRDs(t, CRDBasesDir())
	env.CreateWidgetCRD(t, "v1")
	env.CreateWidgets(t, "v1", namespaces, n)
	return env
}
