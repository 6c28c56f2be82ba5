package migrator_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// A resource that goes away while svm migrates it stops the migration: it
// ends Failed with ResourceNotFound, and the objects it had not rewritten
// are not counted gone. kube-apiserver answers a write of a resource it no
// longer serves with a plain 404 that names no object, which svm confirms
// with a list before it stops. Counted gone, they would have ended the run
// Succeeded: an APIService deleted leaves its objects in the aggregated
// server's storage, in whatever version they were stored in.
//
// Both tests remove the resource at the tenth write, inside the proxy that
// carries svm's requests, and forward that write only once the API server
// answers a list of the resource with 404: every write from then on meets
// the resource gone, however svm's workers are timed. All objects come in
// one chunk, the last one, where the run would otherwise have ended well.

const removedAt = 10

// removeAtWrite starts a proxy to env's API server that, when the
// removedAt-th write of gvr's objects reaches it, calls remove and waits
// until the API server answers a list of gvr with 404 before it forwards
// that write.
func removeAtWrite(t *testing.T, env *framework.Env, gvr schema.GroupVersionResource, remove func(context.Context) error) *framework.Proxy {
	t.Helper()
	proxy := env.StartProxy(t)
	writes := 0
	// The proxy calls this for one request at a time.
	proxy.Intercept(func(r *http.Request) (int, http.Header, bool) {
		if r.Method != http.MethodPatch || !strings.Contains(r.URL.Path, "/"+gvr.Resource+"/") {
			return 0, nil, false
		}
		if writes++; writes != removedAt {
			return 0, nil, false
		}
		ctx := framework.Context(t, 2*time.Minute)
		if err := remove(ctx); err != nil {
			t.Errorf("remove %s: %v", gvr.GroupResource(), err)
			return 0, nil, false
		}
		gone := framework.WaitFor(ctx, time.Minute, func() bool {
			_, err := env.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			return apierrors.IsNotFound(err)
		})
		if !gone {
			t.Errorf("%s still served a minute after its removal", gvr.GroupResource())
		}
		return 0, nil, false
	})
	return proxy
}

// summary matches svm migrate's summary line of the resource name when it
// failed because it is no longer served: listed, migrated, written since
// the start, gone and failed. Progress lines may come before it.
func summary(name string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) +
		`: failed: ResourceNotFound: (\d+) listed: migrated (\d+) \(.*\), written since the start (\d+), gone (\d+), failed (\d+) in `)
}

// migrateUntilRemoved runs svm migrate of name through proxy, expects it to
// fail with ResourceNotFound, and returns the counts it printed: listed,
// migrated and gone.
func migrateUntilRemoved(t *testing.T, proxy *framework.Proxy, name string) (listed, migrated, gone int) {
	t.Helper()
	code, stdout, stderr := framework.SVM(t, "migrate", "--kubeconfig", proxy.Kubeconfig(t), name)
	if code == 0 {
		t.Fatalf("svm migrate exited 0 after its resource was removed\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	m := summary(name).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("svm migrate exited %d without saying %s failed with ResourceNotFound\nstdout:\n%s\nstderr:\n%s", code, name, stdout, stderr)
	}
	if !strings.Contains(stderr, "is no longer served") || !strings.Contains(stderr, "the server could not find the requested resource") {
		t.Errorf("error output does not say the resource is no longer served, with the server's answer:\n%s", stderr)
	}
	t.Logf("svm migrate exited %d:\n%s%s", code, stdout, stderr)
	counts := make([]int, len(m)-1)
	for i := range counts {
		counts[i], _ = strconv.Atoi(m[i+1])
	}
	if counts[2] != 0 || counts[4] != 0 {
		t.Errorf("summary counts objects written since the start or failed:\n%s", stdout)
	}
	return counts[0], counts[1], counts[3]
}

// An APIService deleted mid-run: the migration ends Failed, not Succeeded.
// Its objects stay in etcd: none is gone.
func TestAPIServiceDeletedMidRunFails(t *testing.T) {
	t.Parallel()
	// A control plane of its own: it registers an aggregated API server,
	// then removes it.
	env := framework.Start(t, controlplane.Options{})
	env.StartSampleAPIServer(t)
	const n = 100
	env.CreateFlunders(t, framework.TestName(t), n)

	apiServices := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	proxy := removeAtWrite(t, env, framework.Flunders, func(ctx context.Context) error {
		return env.Dynamic.Resource(apiServices).Delete(ctx, controlplane.SampleAPIVersion+"."+controlplane.SampleAPIGroup, metav1.DeleteOptions{})
	})
	listed, migrated, gone := migrateUntilRemoved(t, proxy, framework.Flunders.Resource+"."+framework.Flunders.Group)
	// How many writes were answered before the run stopped depends on the
	// writes in flight when the APIService went: not a lower bound.
	if listed != n || gone != 0 || migrated >= n {
		t.Errorf("%d listed, %d migrated, %d gone: want all %d listed, not all migrated, none gone", listed, migrated, gone, n)
	}
	if stored := len(env.RawValues(t, framework.SampleAPIEtcdPrefix("flunders"))); stored != n {
		t.Errorf("%d flunders in etcd, want all %d: an APIService deleted deletes no object", stored, n)
	}
}

// A CRD deleted mid-run: the API server deletes its objects, then stops
// serving it; the migration ends Failed all the same. The objects it wrote
// before are migrated, and those its writes met after are not counted.
func TestCRDDeletedMidRunFails(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	r := env.NewResource(t)
	const n = 100
	env.CreateObjects(t, r, []string{framework.TestName(t)}, n)

	proxy := removeAtWrite(t, env, r.GVR("v1"), func(ctx context.Context) error {
		return env.Client.Delete(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: r.CRDName()}})
	})
	listed, migrated, gone := migrateUntilRemoved(t, proxy, r.CRDName())
	// A write sent before the CRD's deletion and answered after the API
	// server deleted its object would count that one gone, rightly: only
	// the writes the proxy forwarded before the tenth can.
	if listed != n || migrated+gone >= n || gone >= removedAt {
		t.Errorf("%d listed, %d migrated, %d gone: want all %d listed, only those written before the CRD went migrated or gone", listed, migrated, gone, n)
	}
}
