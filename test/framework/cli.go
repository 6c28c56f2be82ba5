package framework

import (
	"bytes"
	"testing"
	"time"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/cli"
)

// WriteMigrationStatus writes st as the status of m (as CreateMigration
// returned it), as the controller would have: a test shows a migration in
// a state, say Running mid-way, without running the controller.
func (e *Env) WriteMigrationStatus(t testing.TB, m *migrationv1alpha1.StorageVersionMigration, st migrationv1alpha1.StorageVersionMigrationStatus) {
	t.Helper()
	m.Status = st
	if err := e.Client.Status().Update(Context(t, time.Minute), m); err != nil {
		t.Fatalf("write the status of migration %s: %v", m.Name, err)
	}
}

// CreateInTreeMigration creates an in-tree (storagemigration.k8s.io/v1)
// StorageVersionMigration of gr named name. Without a
// kube-controller-manager running its migrator, it stays pending.
func (e *Env) CreateInTreeMigration(t testing.TB, name string, gr schema.GroupResource) {
	t.Helper()
	m := &storagemigrationv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       storagemigrationv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: gr.Group, Resource: gr.Resource}},
	}
	if _, err := e.Kube.StoragemigrationV1().StorageVersionMigrations().Create(Context(t, time.Minute), m, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create in-tree migration %s: %v", name, err)
	}
}

// SVM runs the svm command line in the test's own process, as `svm args...`
// would run, and returns its exit code and what it printed.
func SVM(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}
