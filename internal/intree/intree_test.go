package intree

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

func TestChoose(t *testing.T) {
	acts := &Verdict{Acts: true, Reason: "its storage-version-migrator-controller took up probe migration svm-executor-probe-x of podtemplates within 400ms"}
	idle := &Verdict{Reason: "no kube-controller-manager lease in kube-system/kube-controller-manager"}
	tests := []struct {
		name    string
		asked   Executor
		served  bool
		probe   *Verdict
		want    Executor
		wantErr bool
	}{
		{name: "svm asked, served", asked: ExecutorSVM, served: true, probe: acts, want: ExecutorSVM},
		{name: "svm asked, not served", asked: ExecutorSVM, want: ExecutorSVM},
		{name: "in-tree asked and served: no probe needed", asked: ExecutorInTree, served: true, want: ExecutorInTree},
		{name: "in-tree asked, not served: an error, not a silent fallback", asked: ExecutorInTree, wantErr: true},
		{name: "auto, not served", asked: ExecutorAuto, want: ExecutorSVM},
		{name: "auto, served, kube-controller-manager acts", asked: ExecutorAuto, served: true, probe: acts, want: ExecutorInTree},
		{name: "auto, served, kube-controller-manager does not act", asked: ExecutorAuto, served: true, probe: idle, want: ExecutorSVM},
		{name: "auto, served, no probe: cannot decide", asked: ExecutorAuto, served: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why, err := Choose(tt.asked, tt.served, tt.probe)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("chose %q, want %q", got, tt.want)
			}
			if err == nil && why == "" {
				t.Error("a choice must say why")
			}
		})
	}
}

func TestParseExecutor(t *testing.T) {
	for _, s := range []string{"auto", "svm", "in-tree"} {
		if e, err := ParseExecutor(s); err != nil || string(e) != s {
			t.Errorf("ParseExecutor(%q) = %q, %v", s, e, err)
		}
	}
	for _, s := range []string{"", "intree", "kcm", "Auto"} {
		if _, err := ParseExecutor(s); err == nil {
			t.Errorf("ParseExecutor(%q) accepted", s)
		}
	}
}

func TestLeaseLive(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lease := func(holder string, renewedAgo time.Duration, duration int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(duration)}}
		if holder != "" {
			l.Spec.HolderIdentity = ptr.To(holder)
		}
		if renewedAgo >= 0 {
			l.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-renewedAgo)}
		}
		return l
	}
	tests := []struct {
		name  string
		lease *coordinationv1.Lease
		want  bool
	}{
		{name: "renewed just now", lease: lease("kcm-1", time.Second, 15), want: true},
		{name: "renewed within duration and margin", lease: lease("kcm-1", 24*time.Second, 15), want: true},
		{name: "not renewed for longer", lease: lease("kcm-1", 26*time.Second, 15), want: false},
		{name: "released: no holder", lease: lease("", time.Second, 15), want: false},
		{name: "never renewed", lease: lease("kcm-1", -1, 15), want: false},
		{name: "no lease", lease: nil, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LeaseLive(tt.lease, now); got != tt.want {
				t.Errorf("LeaseLive = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHolderAndEnded(t *testing.T) {
	cond := func(t storagemigrationv1.MigrationConditionType, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: string(t), Status: s, Message: string(t) + " " + string(s)}
	}
	m := func(name, resource string, forUID string, conds ...metav1.Condition) storagemigrationv1.StorageVersionMigration {
		out := storagemigrationv1.StorageVersionMigration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       storagemigrationv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: "example.com", Resource: resource}},
			Status:     storagemigrationv1.StorageVersionMigrationStatus{Conditions: conds},
		}
		if forUID != "" {
			out.Annotations = map[string]string{ForMigrationAnnotation: forUID}
		}
		return out
	}
	running := cond(storagemigrationv1.MigrationRunning, metav1.ConditionTrue)
	notRunning := cond(storagemigrationv1.MigrationRunning, metav1.ConditionFalse)
	succeeded := cond(storagemigrationv1.MigrationSucceeded, metav1.ConditionTrue)
	failed := cond(storagemigrationv1.MigrationFailed, metav1.ConditionTrue)
	widgets := schema.GroupResource{Group: "example.com", Resource: "widgets"}

	all := []storagemigrationv1.StorageVersionMigration{
		m("pending", "widgets", ""),
		m("gadgets", "gadgets", "", running),
		m("mine", "widgets", "uid-1", running),
		m("users", "widgets", "", running),
	}
	if h := Holder(all, widgets, "uid-1"); h == nil || h.Name != "users" {
		t.Errorf("Holder for uid-1 = %v, want users", h)
	}
	if h := Holder(all[:3], widgets, "uid-1"); h != nil {
		t.Errorf("Holder = %s: an svm migration is never held by its own in-tree migration, nor by pending ones or other resources", h.Name)
	}
	if h := Holder(all[:3], widgets, ""); h == nil || h.Name != "mine" {
		t.Errorf("Holder for nobody = %v, want mine (the trigger's view: any Running one holds)", h)
	}

	// Succeeded with Running still True: kube-controller-manager has not
	// cleaned up (nor pruned) yet.
	cleaning := m("x", "widgets", "", running, succeeded)
	done := m("x", "widgets", "", notRunning, succeeded)
	broke := m("x", "widgets", "", notRunning, failed)
	got := []bool{Ended(&cleaning), Ended(&done), Ended(&broke), Succeeded(&broke)}
	if diff := cmp.Diff([]bool{false, true, true, false}, got); diff != "" {
		t.Errorf("Ended/Succeeded (-want +got):\n%s", diff)
	}
	if msg := Message(&broke); msg != "Failed True" {
		t.Errorf("Message = %q, want the Failed condition's", msg)
	}
}

func TestCanExecute(t *testing.T) {
	all := []string{"create", "delete", "get", "list", "patch", "update", "watch"}
	tests := []struct {
		gr    schema.GroupResource
		verbs []string
		want  bool
	}{
		{schema.GroupResource{Group: "example.com", Resource: "widgets"}, all, true},
		{schema.GroupResource{Resource: "secrets"}, all, true},
		// Its garbage collector ignores events: an in-tree migration of
		// them never ends.
		{schema.GroupResource{Resource: "events"}, all, false},
		{schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, all, false},
		// Not deletable, or not watchable: not in the collector's caches.
		{schema.GroupResource{Group: "example.com", Resource: "gadgets"}, []string{"get", "list", "patch", "watch"}, false},
		{schema.GroupResource{Group: "example.com", Resource: "gizmos"}, []string{"delete", "get", "list", "patch"}, false},
	}
	for _, tt := range tests {
		if got := CanExecute(tt.gr, tt.verbs); got != tt.want {
			t.Errorf("CanExecute(%s, %v) = %v, want %v", tt.gr, tt.verbs, got, tt.want)
		}
	}
}
