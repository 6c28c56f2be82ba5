//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/framework"
)

// svmCRDs are the CRDs Helm installs from the chart's crds/ and never
// deletes.
var svmCRDs = []string{"storageversionmigrations.migration.k8s.io", "storagestates.migration.k8s.io"}

// uninstall uninstalls the release: every object of its manifest is
// deleted, the namespace with it (and so svm's leader election Lease and
// its Events there), and what stays is what docs/install.md says: the
// CRDs, and svm's records in them.
func uninstall(t *testing.T, c *cluster) {
	env := c.env
	manifest, stderr, err := framework.RunHelm(t, "get", "manifest", "svm", "-n", namespace, "--kubeconfig", c.kubeconfig)
	if err != nil {
		t.Fatalf("helm get manifest: %v\n%s", err, stderr)
	}
	objects := framework.DecodeManifests(t, "svm's release", manifest)
	if out, stderr, err := framework.RunHelm(t, "uninstall", "svm", "-n", namespace, "--kubeconfig", c.kubeconfig); err != nil {
		t.Fatalf("helm uninstall: %v\n%s%s", err, out, stderr)
	}
	uninstalled := time.Now()
	var left []string
	err = wait.PollUntilContextTimeout(t.Context(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		left = nil
		for _, o := range objects {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(o.GroupVersionKind())
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), got); !apierrors.IsNotFound(err) {
				left = append(left, fmt.Sprintf("%s %s (%v)", o.GetKind(), client.ObjectKeyFromObject(o), err))
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("3 minutes after helm uninstall, %d of the release's %d objects are left: %v", len(left), len(objects), left)
	}
	t.Logf("the release's %d objects gone %s after helm uninstall, namespace %s with them", len(objects), time.Since(uninstalled).Round(time.Second), namespace)
	for _, name := range svmCRDs {
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
			t.Errorf("CRD %s after helm uninstall: %v, want it kept", name, err)
		}
	}
	var states migrationv1alpha1.StorageStateList
	if err := env.Client.List(t.Context(), &states); err != nil {
		t.Fatal(err)
	}
	t.Logf("kept with the CRDs: %d StorageStates", len(states.Items))
}
