package framework

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// StorageVersionAPIFlags make kube-apiserver v1.37 serve the StorageVersion
// API (internal.apiserver.k8s.io/v1alpha1, alpha, off by default) and
// publish in it the version it encodes each built-in resource in. The
// API server fills it in only with its identity (APIServerIdentity, on by
// default, named here so the flags stay right if that changes).
var StorageVersionAPIFlags = []string{
	"--feature-gates=StorageVersionAPI=true,APIServerIdentity=true",
	"--runtime-config=internal.apiserver.k8s.io/v1alpha1=true",
}

// KubeconfigFile writes an admin kubeconfig for e's API server and returns
// its path.
func (e *Env) KubeconfigFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := e.CP.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// StorageVersion waits until the API server has published the named
// StorageVersion ("<group>.<resource>", "core.<resource>" for the core
// group) and returns it.
func (e *Env) StorageVersion(t testing.TB, name string) *apiserverinternalv1alpha1.StorageVersion {
	t.Helper()
	var sv *apiserverinternalv1alpha1.StorageVersion
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := e.Kube.InternalV1alpha1().StorageVersions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		sv = got
		return len(got.Status.StorageVersions) > 0, nil
	})
	if err != nil {
		t.Fatalf("StorageVersion %s not published: %v", name, err)
	}
	return sv
}

// ReportStorageVersion writes into the named StorageVersion what another
// API server would write there when it starts: its encoding and decodable
// versions under its identity, and the common encoding version recomputed
// (unset unless every server encodes alike), with the condition that says
// so. A nil server instead removes id's entry, as kube-controller-manager
// does once that server's identity lease expires. A test uses it to show a
// cluster in the middle of a rolling upgrade: kube-apiserver derives its
// identity from the host name, so two of them on one machine share one
// identity and one entry, and cannot show it for real.
func (e *Env) ReportStorageVersion(t testing.TB, name, id string, server *apiserverinternalv1alpha1.ServerStorageVersion) {
	t.Helper()
	ctx := Context(t, time.Minute)
	client := e.Kube.InternalV1alpha1().StorageVersions()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sv, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		servers := slices.DeleteFunc(sv.Status.StorageVersions, func(s apiserverinternalv1alpha1.ServerStorageVersion) bool { return s.APIServerID == id })
		if server != nil {
			s := *server
			s.APIServerID = id
			servers = append(servers, s)
		}
		sv.Status.StorageVersions = servers
		sv.Status.CommonEncodingVersion = nil
		cond := apiserverinternalv1alpha1.StorageVersionCondition{
			Type: apiserverinternalv1alpha1.AllEncodingVersionsEqual, Status: apiserverinternalv1alpha1.ConditionFalse,
			ObservedGeneration: sv.Generation, LastTransitionTime: metav1.Now(),
			Reason: "CommonEncodingVersionUnset", Message: "Common encoding version unset",
		}
		if len(servers) > 0 && !slices.ContainsFunc(servers, func(s apiserverinternalv1alpha1.ServerStorageVersion) bool {
			return s.EncodingVersion != servers[0].EncodingVersion
		}) {
			common := servers[0].EncodingVersion
			sv.Status.CommonEncodingVersion = &common
			cond.Status, cond.Reason, cond.Message = apiserverinternalv1alpha1.ConditionTrue, "CommonEncodingVersionSet", "Common encoding version set"
		}
		sv.Status.Conditions = slices.DeleteFunc(sv.Status.Conditions, func(c apiserverinternalv1alpha1.StorageVersionCondition) bool { return c.Type == cond.Type })
		sv.Status.Conditions = append(sv.Status.Conditions, cond)
		_, err = client.UpdateStatus(ctx, sv, metav1.UpdateOptions{FieldManager: "svm-test"})
		return err
	})
	if err != nil {
		t.Fatalf("report storage version of %s for %s: %v", name, id, err)
	}
}
