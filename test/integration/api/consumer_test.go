package api_test

// The tests of svm's public Go API, github.com/svm-project/svm/pkg/migrate:
// a program of another module that imports it alone migrates its own CRD
// and prunes storedVersions; pruning is refused when objects failed or the
// CRD changed during the migration; the RBAC the package documents is
// enough; a controller-runtime manager runs the StartupMigrator.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/svm-project/svm/pkg/migrate"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// consumerDir is the module that uses svm as an operator would.
func consumerDir() string { return filepath.Join(framework.RepoRoot(), "test", "consumer") }

// publicAPI is the one package of svm a program outside it may import.
const publicAPI = "github.com/svm-project/svm/pkg/migrate"

func TestConsumerImportsOnlyThePublicAPI(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(consumerDir(), "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", consumerDir(), err)
	}
	var svmImports []string
	for _, path := range files {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", path, err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == "github.com/svm-project/svm" || strings.HasPrefix(p, "github.com/svm-project/svm/") {
				svmImports = append(svmImports, filepath.Base(path)+": "+p)
				if p != publicAPI {
					t.Errorf("%s imports %s: a program outside svm may import only %s", filepath.Base(path), p, publicAPI)
				}
			}
		}
	}
	if len(svmImports) == 0 {
		t.Errorf("the consumer imports nothing of svm; it must use %s", publicAPI)
	}
	goMod := string(framework.MustReadFile(t, filepath.Join(consumerDir(), "go.mod")))
	for _, want := range []string{"module example.com/consumer\n", "github.com/svm-project/svm v0.0.0", "replace github.com/svm-project/svm => ../.."} {
		if !strings.Contains(goMod, want) {
			t.Errorf("test/consumer/go.mod lacks %q:\n%s", want, goMod)
		}
	}
}

// TestConsumerMigratesItsCRD is the public API's end-to-end check: a
// program of another module, built with its own go.mod and go.sum,
// migrates a CRD after a storage flip and prunes storedVersions, and etcd
// shows every object stored in the new version, unchanged.
func TestConsumerMigratesItsCRD(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	bin := buildConsumer(t)
	r := env.NewResource(t)
	const n = 40
	before := env.StoredInOldVersion(t, r, []string{framework.TestName(t)}, n)
	prefix := r.EtcdPrefix()
	// The starting point, or the checks below prove nothing.
	env.ExpectStored(t, prefix, map[string]int{r.Group + "/v1": n})
	if diff := cmp.Diff([]string{"v1", "v2"}, env.CRDStoredVersions(t, r.CRDName())); diff != "" {
		t.Fatalf("storedVersions after the flip (-want +got):\n%s", diff)
	}
	kubeconfig := env.KubeconfigFile(t)

	got := runConsumer(t, bin, kubeconfig, r.CRDName())
	want := migrate.CRDResult{
		Name:           r.CRDName(),
		StorageVersion: "v2",
		Migration: &migrate.Result{
			Resource: r.GVR("v2"),
			Counts:   migrate.Counts{Listed: n, Restored: n, ManagedFieldsRewritten: n},
		},
		StoredVersionsBefore: []string{"v1", "v2"},
		StoredVersionsAfter:  []string{"v2"},
		Pruned:               true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("what the consumer printed (-want +got):\n%s", diff)
	}
	env.ExpectStored(t, prefix, map[string]int{r.Group + "/v2": n})
	if diff := cmp.Diff([]string{"v2"}, env.CRDStoredVersions(t, r.CRDName())); diff != "" {
		t.Errorf("storedVersions after the consumer (-want +got):\n%s", diff)
	}
	env.ExpectUnchanged(t, r.GVR("v1"), before)

	t.Run("run again: nothing to do, nothing written", func(t *testing.T) {
		revisions := env.ModRevisions(t, prefix)
		got := runConsumer(t, bin, kubeconfig, r.CRDName())
		want := migrate.CRDResult{
			Name:                 r.CRDName(),
			StorageVersion:       "v2",
			StoredVersionsBefore: []string{"v2"},
			StoredVersionsAfter:  []string{"v2"},
			NotPrunedReason:      "status.storedVersions lists only the storage version, and nothing else says another may be stored: nothing to migrate from",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("what the consumer printed (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(revisions, env.ModRevisions(t, prefix)); diff != "" {
			t.Errorf("etcd revisions of the objects changed (-before +after):\n%s", diff)
		}
	})
}

// buildConsumer builds test/consumer, a module of its own, into a
// temporary directory. Its go.sum is the one checked in and nothing is
// downloaded: a build that needs the network fails.
func buildConsumer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "consumer")
	cmd := exec.CommandContext(framework.Context(t, 5*time.Minute), "go", "build", "-o", bin, ".")
	cmd.Dir = consumerDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly -buildvcs=false", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build test/consumer (go mod tidy there if its go.sum is stale): %v\n%s", err, out)
	}
	return bin
}

// runConsumer runs the consumer on crd, requires it to exit 0 and returns
// the result it printed.
func runConsumer(t *testing.T, bin, kubeconfig, crd string) migrate.CRDResult {
	t.Helper()
	cmd := exec.CommandContext(framework.Context(t, 2*time.Minute), bin, "--kubeconfig", kubeconfig, "--crd", crd, "--crd-drain-margin", framework.TestDrainMargin.String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("consumer --crd %s: %v\nstdout:\n%s\nstderr:\n%s", crd, err, stdout.String(), stderr.String())
	}
	var res migrate.CRDResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("consumer printed no result: %v\nstdout:\n%s", err, stdout.String())
	}
	return res
}

// TestConsumerRetiresAnOldVersion: the consumer, a program of another
// module, retires v1 of its CRD with migrate.Retire after objects were
// written through v1 by server-side apply and the storage moved to v2:
// etcd then holds v2 only, no managedFields entry names v1, storedVersions
// is [v2], and server-side apply still works once v1 is removed.
func TestConsumerRetiresAnOldVersion(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	bin := buildConsumer(t)
	r := env.NewResource(t)
	ns := framework.TestName(t)
	env.CreateNamespace(t, ns)
	const n = 20
	ssa := func(version, manager string, i int, field string) error {
		body := fmt.Sprintf(`{"apiVersion":"%s/%s","kind":"%s","metadata":{"name":"obj-%02d","namespace":%q},"spec":{%q:"set"}}`,
			r.Group, version, r.Kind, i, ns, field)
		_, err := env.Dynamic.Resource(r.GVR(version)).Namespace(ns).Patch(framework.Context(t, time.Minute), fmt.Sprintf("obj-%02d", i),
			types.ApplyPatchType, []byte(body), metav1.PatchOptions{FieldManager: manager})
		return err
	}
	for i := range n {
		if err := ssa("v1", "operator", i, "color"); err != nil {
			t.Fatal(err)
		}
	}
	env.SetStorage(t, r, "v2")

	cmd := exec.CommandContext(framework.Context(t, 2*time.Minute), bin, "--kubeconfig", env.KubeconfigFile(t), "--crd", r.CRDName(), "--retire", "v1", "--crd-drain-margin", framework.TestDrainMargin.String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("consumer --retire v1: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var res migrate.RetireResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("consumer printed no result: %v\nstdout:\n%s", err, stdout.String())
	}
	if !res.MayBeStored || !res.Pruned || res.Migration == nil || res.Migration.ManagedFieldsRewritten != n || res.Migration.Restored != n ||
		res.Target != r.Group+"/v2" || !res.Served {
		t.Errorf("Retire = %+v, want every object rewritten with its managedFields moved, storedVersions pruned, v1 still served", res)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	if diff := cmp.Diff(map[string]int{r.Group + "/v2": n}, env.ManagedFieldsVersions(t, r.EtcdPrefix())); diff != "" {
		t.Errorf("managedFields in etcd (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"v2"}, env.CRDStoredVersions(t, r.CRDName())); diff != "" {
		t.Errorf("storedVersions (-want +got):\n%s", diff)
	}
	ctx := framework.Context(t, time.Minute)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: r.CRDName()}, crd); err != nil {
			return err
		}
		crd.Spec.Versions = crd.Spec.Versions[1:] // v1 comes first
		return env.Client.Update(ctx, crd)
	}); err != nil {
		t.Fatalf("remove v1: %v", err)
	}
	framework.Eventually(t, "v1 no longer served", time.Minute, func(context.Context) (bool, error) {
		_, err := env.Discovery.ServerResourcesForGroupVersion(r.Group + "/v1")
		return err != nil, nil
	})
	for i := range n {
		if err := ssa("v2", "newcomer", i, "shape"); err != nil {
			t.Errorf("server-side apply after v1's removal: %v", err)
		}
	}
}

func TestCRDNotPrunedWhenObjectsFail(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	r := env.NewResource(t)
	ns := framework.TestName(t)
	const n = 20
	env.StoredInOldVersion(t, r, []string{ns}, n)
	denied := ns + "/obj-00007"
	framework.StartDenyingWebhook(t, env, r, map[string]bool{denied: true})

	res, err := migrate.CRD(framework.Context(t, 2*time.Minute), env.Config, r.CRDName(), migrate.Options{CRDDrainMargin: framework.TestDrainMargin})
	var failed *migrate.ObjectsFailedError
	if !errors.As(err, &failed) || failed.Count != 1 || migrate.IsTransient(err) {
		t.Fatalf("CRD = %v, want an *ObjectsFailedError for 1 object", err)
	}
	if res.Pruned || res.NotPrunedReason != "1 objects could not be rewritten" || res.Migration == nil ||
		res.Migration.Counts != (migrate.Counts{Listed: n, Restored: n - 1, Failed: 1, ManagedFieldsRewritten: n - 1}) {
		t.Fatalf("CRD result = %+v, want not pruned, %d restored and 1 failed", res, n-1)
	}
	if len(res.Migration.FailedObjects) != 1 || res.Migration.FailedObjects[0].Namespace+"/"+res.Migration.FailedObjects[0].Name != denied ||
		!strings.Contains(res.Migration.FailedObjects[0].Reason, "test policy denies "+denied) {
		t.Errorf("failed objects = %+v, want %s with the webhook's reason", res.Migration.FailedObjects, denied)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n - 1, r.Group + "/v1": 1})
	if diff := cmp.Diff([]string{"v1", "v2"}, env.CRDStoredVersions(t, r.CRDName())); diff != "" {
		t.Errorf("storedVersions were pruned with an object left in v1 (-want +got):\n%s", diff)
	}
}

func TestCRDNotPrunedAcrossAStorageChange(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	r := env.NewResource(t)
	const n = 30
	before := env.StoredInOldVersion(t, r, []string{framework.TestName(t)}, n)
	ctx := framework.Context(t, 3*time.Minute)

	// Halfway through the migration to v2, v1 becomes the storage version
	// again: what the migration wrote proves nothing about v1.
	var flip sync.Once
	opts := migrate.Options{ChunkSize: 5, CRDDrainMargin: framework.TestDrainMargin, OnProgress: func(migrate.Progress) {
		flip.Do(func() { env.SetCRDStorageVersion(t, r.CRDName(), "v1") })
	}}
	res, err := migrate.CRD(ctx, env.Config, r.CRDName(), opts)
	if !errors.Is(err, migrate.ErrCRDChanged) || !migrate.IsTransient(err) {
		t.Fatalf("CRD = %v, want ErrCRDChanged, transient", err)
	}
	if res.Pruned || res.Migration == nil || res.StorageVersion != "v2" || !strings.Contains(res.NotPrunedReason, "storage version changed from v2 to v1") {
		t.Errorf("CRD result = %+v, want migrated to v2, not pruned because the storage version changed", res)
	}
	if diff := cmp.Diff([]string{"v1", "v2"}, env.CRDStoredVersions(t, r.CRDName())); diff != "" {
		t.Errorf("storedVersions after the storage changed mid-migration (-want +got):\n%s", diff)
	}

	// Called again, it migrates to v1 and prunes to v1, once the API
	// server has taken up v1 (until then it says so, transiently).
	framework.Eventually(t, "migrate to v1", time.Minute, func(ctx context.Context) (bool, error) {
		res, err = migrate.CRD(ctx, env.Config, r.CRDName(), migrate.Options{CRDDrainMargin: framework.TestDrainMargin})
		if migrate.IsTransient(err) {
			t.Logf("not yet: %v", err)
			return false, nil
		}
		return true, err
	})
	if !res.Pruned || res.StorageVersion != "v1" || res.Migration == nil || res.Migration.Failed != 0 || res.Migration.Listed != n {
		t.Errorf("CRD result = %+v, want %d objects migrated to v1 and pruned", res, n)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v1": n})
	if diff := cmp.Diff([]string{"v1"}, env.CRDStoredVersions(t, r.CRDName())); diff != "" {
		t.Errorf("storedVersions (-want +got):\n%s", diff)
	}
	env.ExpectUnchanged(t, r.GVR("v1"), before)
}

// TestCRDWithTheDocumentedRBAC runs CRD as a ServiceAccount with exactly
// the RBAC the package documents: without the CRD status update it
// migrates but cannot prune, and says so; with it, it prunes.
func TestCRDWithTheDocumentedRBAC(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	r := env.NewResource(t)
	ns := framework.TestName(t)
	const n = 20
	env.StoredInOldVersion(t, r, []string{ns}, n)
	ctx := framework.Context(t, 3*time.Minute)

	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{r.Group}, Resources: []string{r.Plural}, Verbs: []string{"list", "watch", "update", "patch"}},
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get"}, ResourceNames: []string{r.CRDName()}},
		},
	}
	statusRule := rbacv1.PolicyRule{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions/status"}, Verbs: []string{"update"}, ResourceNames: []string{r.CRDName()}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "operator", Namespace: ns}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}},
	}
	for _, obj := range []client.Object{role, sa, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
	cfg := restConfigOf(t, env.ServiceAccountKubeconfig(t, ns, sa.Name))

	// RBAC takes effect a moment after it is written: wait until the
	// migration itself is allowed.
	var res migrate.CRDResult
	var err error
	var terminal *migrate.TerminalError
	framework.Eventually(t, "RBAC allows the migration", time.Minute, func(ctx context.Context) (bool, error) {
		res, err = migrate.CRD(ctx, cfg, r.CRDName(), migrate.Options{CRDDrainMargin: framework.TestDrainMargin})
		return res.Migration != nil && res.Migration.Listed > 0, nil
	})
	if !errors.As(err, &terminal) || terminal.Reason != migrate.ReasonForbidden || res.Pruned ||
		res.Migration.Counts != (migrate.Counts{Listed: n, Restored: n, ManagedFieldsRewritten: n}) {
		t.Fatalf("CRD without the status update: %v, %+v; want every object restored, then Forbidden", err, res)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	if diff := cmp.Diff([]string{"v1", "v2"}, env.CRDStoredVersions(t, r.CRDName())); diff != "" {
		t.Errorf("storedVersions (-want +got):\n%s", diff)
	}

	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(role), role); err != nil {
			return err
		}
		role.Rules = append(role.Rules, statusRule)
		return env.Client.Update(ctx, role)
	}); err != nil {
		t.Fatalf("grant the status update: %v", err)
	}
	revisions := env.ModRevisions(t, r.EtcdPrefix())
	framework.Eventually(t, "prune with the documented RBAC", time.Minute, func(ctx context.Context) (bool, error) {
		res, err = migrate.CRD(ctx, cfg, r.CRDName(), migrate.Options{CRDDrainMargin: framework.TestDrainMargin})
		return !errors.As(err, &terminal) || terminal.Reason != migrate.ReasonForbidden, nil
	})
	if err != nil || !res.Pruned || res.Migration == nil {
		t.Fatalf("CRD with the documented RBAC: %v, %+v; want pruned", err, res)
	}
	// The objects were current already: the run that pruned wrote none.
	if res.Migration.Counts != (migrate.Counts{Listed: n, AlreadyCurrent: n}) {
		t.Errorf("counts of the run that pruned = %+v, want all %d already current", res.Migration.Counts, n)
	}
	if diff := cmp.Diff(revisions, env.ModRevisions(t, r.EtcdPrefix())); diff != "" {
		t.Errorf("objects already current were stored again (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"v2"}, env.CRDStoredVersions(t, r.CRDName())); diff != "" {
		t.Errorf("storedVersions (-want +got):\n%s", diff)
	}
}

func restConfigOf(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("load %s: %v", kubeconfig, err)
	}
	return cfg
}

// TestStartupMigratorInAManager adds a StartupMigrator to a real
// controller-runtime manager, as an operator would: a CRD that cannot be
// migrated is reported and does not stop the next one, nor the manager,
// which later shuts down at once.
func TestStartupMigratorInAManager(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	r := env.NewResource(t)
	const n = 25
	before := env.StoredInOldVersion(t, r, []string{framework.TestName(t)}, n)
	missing := "missing." + r.Group

	var mu sync.Mutex
	var log bytes.Buffer
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(&log, prefix, args)
	}, funcr.Options{})
	mgr, err := manager.New(env.Config, manager.Options{
		Metrics:     metricsserver.Options{BindAddress: "0"},
		BaseContext: func() context.Context { return logr.NewContext(context.Background(), logger) },
	})
	if err != nil {
		t.Fatalf("new manager: %v", err)
	}
	type outcome struct {
		res migrate.CRDResult
		err error
	}
	results := make(chan outcome, 2)
	sm := migrate.NewStartupMigrator(env.Config, []string{missing, r.CRDName()}, migrate.StartupOptions{
		Options:  migrate.Options{FieldManager: "widgets-operator", CRDDrainMargin: framework.TestDrainMargin},
		OnResult: func(res migrate.CRDResult, err error) { results <- outcome{res, err} },
	})
	if err := mgr.Add(sm); err != nil {
		t.Fatalf("add the startup migrator: %v", err)
	}
	ctx, stop := context.WithCancel(framework.Context(t, 3*time.Minute))
	defer stop()
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()

	var got []outcome
	for range 2 {
		select {
		case o := <-results:
			got = append(got, o)
		case err := <-stopped:
			t.Fatalf("the manager stopped: %v", err)
		case <-ctx.Done():
			t.Fatal("the startup migrator did not report both CRDs in time")
		}
	}
	var terminal *migrate.TerminalError
	if got[0].res.Name != missing || !errors.As(got[0].err, &terminal) || terminal.Reason != migrate.ReasonCRDNotFound {
		t.Errorf("first CRD: %+v, %v; want %s not found", got[0].res, got[0].err, missing)
	}
	if got[1].res.Name != r.CRDName() || got[1].err != nil || !got[1].res.Pruned || got[1].res.Migration == nil || got[1].res.Migration.Restored != n {
		t.Errorf("second CRD: %+v, %v; want %d objects restored and pruned", got[1].res, got[1].err, n)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	if diff := cmp.Diff([]string{"v2"}, env.CRDStoredVersions(t, r.CRDName())); diff != "" {
		t.Errorf("storedVersions (-want +got):\n%s", diff)
	}
	env.ExpectUnchanged(t, r.GVR("v1"), before)

	select {
	case err := <-stopped:
		t.Fatalf("the manager stopped after the migrations: %v", err)
	default:
	}
	stop()
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("manager.Start = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not stop within 30s")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{
		`"msg"="CRD not migrated" "error"=`,
		`"reason"="CRDNotFound"`,
		`"msg"="Migrated CRD and pruned its storedVersions" "crd"="` + r.CRDName() + `"`,
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the manager's log lacks %s:\n%s", want, log.String())
		}
	}
}
