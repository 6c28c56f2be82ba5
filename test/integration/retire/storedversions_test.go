package retire

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svm-project/svm/pkg/migrate"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// retireReport is what these tests read of `svm retire -o json`.
type retireReport struct {
	Outcome       string `json:"outcome"`
	MayBeStored   bool   `json:"mayBeStored"`
	StoredBecause string `json:"storedBecause"`
	Unserved      bool   `json:"unserved"`
}

func retireJSON(t *testing.T, kubeconfig, name string, args ...string) (int, retireReport, string) {
	t.Helper()
	args = append([]string{"retire", name, "-o", "json", "--crd-drain-margin", framework.TestDrainMargin.String()}, args...)
	code, out, errOut := framework.RunSVM(t, kubeconfig, 5*time.Minute, args...)
	var r retireReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("svm %s: exit %d, -o json: %v\n%s\n%s", strings.Join(args, " "), code, err, out, errOut)
	}
	return code, r, out + errOut
}

// TestRetireRewritesWhatACRDRecreatedOverOrphansLeft: a CRD deleted
// without its objects (as a force-delete that removes its finalizer
// leaves them) and created again with v2 as its storage version starts with
// storedVersions [v2], over objects stored in v1. Neither svm retire nor
// pkg/migrate's CRD takes storedVersions' word for it: the objects are
// older than the CRD. CRD rewrites them all; retire --unserve stops
// serving v1 only once etcd holds them in v2, and they still read.
func TestRetireRewritesWhatACRDRecreatedOverOrphansLeft(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)
	r := env.NewResource(t)
	ns := framework.TestName(t)
	const n = 12
	createThroughV2(t, env, r, ns, "orphan", n)
	before := env.TakeSnapshot(t, r.GVR("v2"))
	orphans := env.RawValues(t, r.EtcdPrefix())
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v1": n})

	env.RecreateCRDOverOrphans(t, r.CRDName(), "v2", orphans)
	if got := env.CRDStoredVersions(t, r.CRDName()); !slices.Equal(got, []string{"v2"}) {
		t.Fatalf("storedVersions %v after the CRD was created again, want [v2]", got)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v1": n})

	name := "widgets.v1." + r.Group
	code, rep, out := retireJSON(t, kubeconfig, name, "--dry-run")
	if code != 0 || !rep.MayBeStored || !strings.Contains(rep.StoredBecause, "12 objects were created before customresourcedefinition "+r.CRDName()) {
		t.Errorf("svm retire --dry-run: exit %d, %+v; want v1 said to hold objects because they are older than the CRD\n%s", code, rep, out)
	}

	res, err := migrate.CRD(framework.Context(t, 3*time.Minute), env.Config, r.CRDName(), migrate.Options{CRDDrainMargin: framework.TestDrainMargin})
	if err != nil || res.Migration == nil || !strings.Contains(res.StoredBecause, "created before") {
		t.Fatalf("migrate.CRD = %+v, %v; want a migration, and why", res, err)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})

	code, rep, out = retireJSON(t, kubeconfig, name, "--unserve", "--quiet-for", "1s")
	if code != 0 || !rep.Unserved {
		t.Fatalf("svm retire --unserve: exit %d, %+v\n%s", code, rep, out)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	env.ExpectUnchanged(t, r.GVR("v2"), before)
}

// TestRetireRefusesAfterAFailedInTreeMigration: kube-controller-manager
// 1.37 owns a CRD's storedVersions once one of its migrations succeeded,
// and cuts them to the storage version when it starts the next. When that
// one fails (an admission webhook refuses its writes), the objects stay in
// v1 under storedVersions [v2]. svm retire --unserve takes the failed
// migration for what it is: it tries to rewrite them, is refused as
// kube-controller-manager was, and stops serving nothing; etcd still
// holds them in v1, and they still read.
func TestRetireRefusesAfterAFailedInTreeMigration(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{ControllerManager: true})
	kubeconfig := env.KubeconfigFile(t)
	r := env.NewResource(t)
	ns := framework.TestName(t)
	const n = 15
	createThroughV2(t, env, r, ns, "w", n)
	gr := r.GVR("v1").GroupResource()
	// The first in-tree migration succeeds: kube-controller-manager prunes
	// storedVersions to [v1] and owns them from then on.
	env.CreateInTreeMigration(t, "first", gr)
	waitInTreeEnded(t, env, "first", storagemigrationv1.MigrationSucceeded)
	env.SetStorage(t, r, "v2")
	if got := env.CRDStoredVersions(t, r.CRDName()); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Fatalf("storedVersions %v after the flip, want [v1 v2]", got)
	}
	framework.StartAdmissionWebhook(t, env, framework.AdmissionHook{Resource: r,
		Review: func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusForbidden, Message: "test policy refuses every update"}}
		}})
	env.CreateInTreeMigration(t, "second", gr)
	waitInTreeEnded(t, env, "second", storagemigrationv1.MigrationFailed)
	if got := env.CRDStoredVersions(t, r.CRDName()); !slices.Equal(got, []string{"v2"}) {
		t.Fatalf("storedVersions %v after the failed in-tree migration, want [v2]: kube-controller-manager no longer cuts them early, and this test shows nothing", got)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v1": n})

	// check-upgrade, which reads no object, takes the failed migration
	// the same way: v1 may be stored, and a target without it is unsafe.
	code, out, errOut := framework.RunSVM(t, kubeconfig, time.Minute, "check-upgrade", "--decodable", r.CRDName()+"=v2")
	if code != 3 || !strings.Contains(out, "the target cannot decode v1 (failed in-tree migration)") {
		t.Errorf("svm check-upgrade --decodable %s=v2: exit %d, want 3 (unsafe) for v1 after the failed in-tree migration\n%s\n%s", r.CRDName(), code, out, errOut)
	}

	code, rep, out := retireJSON(t, kubeconfig, "widgets.v1."+r.Group, "--unserve", "--quiet-for", "1s")
	if code == 0 || rep.Unserved || !rep.MayBeStored || !strings.Contains(rep.StoredBecause, "in-tree migration second failed") {
		t.Errorf("svm retire --unserve: exit %d, %+v; want a refusal naming the failed in-tree migration\n%s", code, rep, out)
	}
	if !strings.Contains(out, "test policy refuses every update") {
		t.Errorf("the refusal does not name the webhook's answer:\n%s", out)
	}
	if !env.CRDServes(t, r.CRDName(), "v1") {
		t.Error("v1 was unserved while etcd holds objects in it")
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v1": n})
	if got := len(env.List(t, r.GVR("v2"))); got != n {
		t.Errorf("%d objects read, want %d", got, n)
	}
}

// waitInTreeEnded waits until the in-tree migration name has ended with
// condition want, and fails the test when it ends otherwise.
func waitInTreeEnded(t *testing.T, env *framework.Env, name string, want storagemigrationv1.MigrationConditionType) {
	t.Helper()
	framework.Eventually(t, "in-tree migration "+name+" "+string(want), 5*time.Minute, func(ctx context.Context) (bool, error) {
		m, err := env.Kube.StoragemigrationV1().StorageVersionMigrations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, end := range []storagemigrationv1.MigrationConditionType{storagemigrationv1.MigrationSucceeded, storagemigrationv1.MigrationFailed} {
			if meta.IsStatusConditionTrue(m.Status.Conditions, string(end)) {
				if end != want {
					return false, fmt.Errorf("ended %s, want %s: %+v", end, want, m.Status.Conditions)
				}
				return true, nil
			}
		}
		return false, nil
	})
}

// createThroughV2 creates n objects of r named prefix-NN in namespace ns,
// written through v2: their managedFields name v2, whatever they are
// stored in.
func createThroughV2(t *testing.T, env *framework.Env, r framework.Resource, ns, prefix string, n int) {
	t.Helper()
	env.CreateNamespace(t, ns)
	for i := range n {
		obj := r.Object("v2", fmt.Sprintf("%s-%02d", prefix, i), i)
		obj.SetNamespace(ns)
		if _, err := env.Dynamic.Resource(r.GVR("v2")).Namespace(ns).Create(framework.Context(t, time.Minute), obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
