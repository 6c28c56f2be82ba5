package migration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/operation"
	"github.com/svm-project/svm/internal/scheme"
)

func TestUnknownObservedGeneration(t *testing.T) {
	// What kube-apiserver 1.34 answers a server-side apply of the condition
	// with observedGeneration, a field its CRD schema lacks.
	refused := apierrors.NewBadRequest(`failed to create typed patch object (apiextensions.k8s.io/v1, Kind=CustomResourceDefinition): .status.conditions[type="StorageMigrating"].observedGeneration: field not declared in schema`)
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{nil, false},
		{apierrors.NewBadRequest("field not declared in schema: .spec.foo"), false},
		{apierrors.NewConflict(schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}, "widgets.example.com", errors.New("the object has been modified")), false},
	} {
		if got := unknownObservedGeneration(c.err); got != c.want {
			t.Errorf("unknownObservedGeneration(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// inTreeCase is an InTreeExecutor over a fake client holding existing.
type inTreeCase struct {
	name     string
	verbs    []string
	empty    bool
	existing *storagemigrationv1.StorageVersionMigration
	// wantFallback: svm's engine runs the migration; wantReason: it
	// fails with a TerminalError of that reason; wantCreated: an in-tree
	// migration owned by svm's is created.
	wantFallback bool
	wantReason   string
	wantCreated  bool
}

func TestInTreeExecutor(t *testing.T) {
	allVerbs := []string{"list", "watch", "delete", "patch"}
	ended := func(forUID types.UID, cond storagemigrationv1.MigrationConditionType, message string) *storagemigrationv1.StorageVersionMigration {
		it := inTree("widgets", "widgets", false, forUID)
		it.Spec.Resource.Group = "example.com"
		it.Status.Conditions = []metav1.Condition{{Type: string(cond), Status: metav1.ConditionTrue, Message: message}}
		return &it
	}
	for _, tc := range []inTreeCase{
		{name: "a resource kube-controller-manager cannot execute falls back", verbs: []string{"list", "patch"}, wantFallback: true},
		{name: "an empty resource falls back", verbs: allVerbs, empty: true, wantFallback: true},
		{name: "a new migration is handed over", verbs: allVerbs, wantCreated: true},
		{name: "its in-tree migration succeeded", verbs: allVerbs, existing: ended("uid-widgets", storagemigrationv1.MigrationSucceeded, "")},
		{name: "its in-tree migration failed", verbs: allVerbs, existing: ended("uid-widgets", storagemigrationv1.MigrationFailed, "denied"), wantReason: ReasonInTreeMigrationFailed},
		{name: "someone else's in-tree migration of that name", verbs: allVerbs, existing: ended("uid-other", storagemigrationv1.MigrationSucceeded, ""), wantReason: ReasonInTreeNameTaken},
	} {
		t.Run(tc.name, func(t *testing.T) { checkInTreeExecutor(t, tc) })
	}
}

func checkInTreeExecutor(t *testing.T, tc inTreeCase) {
	b := fake.NewClientBuilder().WithScheme(scheme.Scheme)
	if tc.existing != nil {
		b = b.WithObjects(tc.existing)
	}
	cl := b.Build()
	fallback := &recordingExecutor{}
	e := InTreeExecutor{
		Client: cl, Reader: cl, Fallback: fallback, Clock: clocktesting.NewFakeClock(t0),
		Lookup: func(context.Context, schema.GroupVersionResource) (*metav1.APIResource, error) {
			return &metav1.APIResource{Verbs: tc.verbs, StorageVersionHash: "hash"}, nil
		},
		Empty: func(context.Context, schema.GroupVersionResource) (bool, error) { return tc.empty, nil },
	}
	m := stopped("")
	// A handed-over run follows its in-tree migration until stopped; here
	// it stops once handed over.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var delegated []string
	_, err := e.Execute(ctx, Run{Migration: m, Resource: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"},
		OnDelegated: func(_ context.Context, inTree string) error {
			delegated = append(delegated, inTree)
			if tc.wantCreated {
				cancel()
			}
			return nil
		}})
	var terminal *operation.TerminalError
	switch {
	case tc.wantReason != "":
		if !errors.As(err, &terminal) || terminal.Reason != tc.wantReason {
			t.Errorf("error %v, want a TerminalError with reason %s", err, tc.wantReason)
		}
	case tc.wantCreated:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want the run's stop", err)
		}
	case err != nil:
		t.Errorf("error %v", err)
	}
	if got := len(fallback.runs) == 1; got != tc.wantFallback {
		t.Errorf("svm's engine ran %d times, want it to run: %v", len(fallback.runs), tc.wantFallback)
	}
	if wantDelegated := !tc.wantFallback && tc.wantReason != ReasonInTreeNameTaken; (len(delegated) == 1 && delegated[0] == "widgets") != wantDelegated {
		t.Errorf("delegated to %v, want delegated to widgets: %v", delegated, wantDelegated)
	}
	checkInTreeCreated(t, cl, tc, m.UID)
}

// checkInTreeCreated checks that an in-tree migration for uid was created
// if and only if tc wants one.
func checkInTreeCreated(t *testing.T, cl client.Client, tc inTreeCase, uid types.UID) {
	t.Helper()
	var it storagemigrationv1.StorageVersionMigration
	err := cl.Get(t.Context(), client.ObjectKey{Name: "widgets"}, &it)
	switch {
	case tc.wantCreated && err != nil:
		t.Errorf("no in-tree migration created: %v", err)
	case tc.wantCreated:
		if it.Annotations[intree.ForMigrationAnnotation] != string(uid) || len(it.OwnerReferences) != 1 || it.OwnerReferences[0].UID != uid ||
			it.Spec.Resource != (metav1.GroupResource{Group: "example.com", Resource: "widgets"}) {
			t.Errorf("in-tree migration %+v: want one of widgets.example.com, owned by and annotated for %s", it, uid)
		}
	case tc.existing == nil && !apierrors.IsNotFound(err):
		t.Errorf("an in-tree migration was created (%v), want none", err)
	}
}

// Only a run the guard held says MigrationSucceeded on the CRD.
func TestCRDCondition(t *testing.T) {
	for _, tc := range []struct {
		end        runEnd
		wantReason string
	}{
		{endSucceeded, crdReasonSucceeded},
		{endFailed, crdReasonFailed},
		{endStopped, crdReasonStopped},
		{endStartedOver, crdReasonStartedOver},
	} {
		reason, message := crdCondition(tc.end, "widgets-1")
		if reason != tc.wantReason || !strings.Contains(message, "svm migration widgets-1 ") {
			t.Errorf("crdCondition(%d) = %q, %q; want reason %q, naming the migration", tc.end, reason, message, tc.wantReason)
		}
		if tc.end != endSucceeded && strings.Contains(message, "succeeded") {
			t.Errorf("crdCondition(%d) says %q: only a run the guard held succeeded", tc.end, message)
		}
	}
}

func TestEndOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want runEnd
	}{
		{nil, endSucceeded},
		{&operation.TerminalError{Reason: "X", Err: errors.New("x")}, endFailed},
		{fmt.Errorf("wrapped: %w", &operation.ObjectsFailedError{}), endFailed},
		{context.Canceled, endStopped},
		{errors.New("connection refused"), endStopped},
	} {
		if got := endOf(tc.err); got != tc.want {
			t.Errorf("endOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// A migration is handed over only once no managedFields entry names a
// version kube-controller-manager would prune.
func TestHandOverAfterMove(t *testing.T) {
	left := operation.Progress{}
	left.ManagedFieldsLeft.Denied = 2
	failed := operation.Progress{}
	failed.Failed = 1
	moved := operation.Progress{}
	moved.ManagedFieldsRewritten = 10
	for _, tc := range []struct {
		name string
		p    operation.Progress
		err  error
		want moveVerdict
	}{
		{"every entry moved", moved, nil, moveHandOver},
		{"nothing to move", operation.Progress{}, nil, moveHandOver},
		{"entries left", left, nil, moveFallBack},
		{"objects failed", failed, &operation.ObjectsFailedError{}, moveFallBack},
		{"stopped", moved, context.Canceled, moveRetry},
		{"transient trouble", operation.Progress{}, errors.New("connection refused"), moveRetry},
		{"terminal", operation.Progress{}, &operation.TerminalError{Reason: "X", Err: errors.New("x")}, moveRetry},
	} {
		if got := handOverAfterMove(tc.p, tc.err); got != tc.want {
			t.Errorf("%s: handOverAfterMove = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// An in-tree migration of the name that svm created for an earlier
// migration, or that is being deleted, is waited for, not taken for a
// stranger's.
func TestInTreeExecutorWaitsForAnAbandonedOne(t *testing.T) {
	earlier := inTree("widgets", "widgets", false, "uid-earlier")
	earlier.Spec.Resource.Group = "example.com"
	earlier.Labels = map[string]string{intree.CreatedByLabel: intree.CreatedByExecutor}
	deleting := inTree("widgets", "widgets", false, "uid-widgets")
	deleting.Spec.Resource.Group = "example.com"
	deleting.Finalizers = []string{"example.com/hold"}
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	for name, existing := range map[string]*storagemigrationv1.StorageVersionMigration{"svm's, for an earlier migration": &earlier, "its own, being deleted": &deleting} {
		t.Run(name, func(t *testing.T) {
			cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(existing).Build()
			fallback := &recordingExecutor{}
			e := InTreeExecutor{Client: cl, Reader: cl, Fallback: fallback, Clock: clocktesting.NewFakeClock(t0),
				Lookup: func(context.Context, schema.GroupVersionResource) (*metav1.APIResource, error) {
					return &metav1.APIResource{Verbs: []string{"list", "watch", "delete", "patch"}}, nil
				}}
			_, err := e.Execute(t.Context(), Run{Migration: stopped(""), Resource: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"},
				OnDelegated: func(context.Context, string) error { t.Error("handed over"); return nil }})
			var terminal *operation.TerminalError
			if err == nil || errors.As(err, &terminal) || len(fallback.runs) != 0 {
				t.Errorf("error %v, %d engine runs: want a transient error, to wait", err, len(fallback.runs))
			}
		})
	}
}

// Abandon deletes the migration's own in-tree migration, and no other.
func TestInTreeExecutorAbandon(t *testing.T) {
	for _, tc := range []struct {
		name       string
		forUID     types.UID
		wantExists bool
	}{
		{"its own", "uid-widgets", false},
		{"another's", "uid-other", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := inTree("widgets", "widgets", false, tc.forUID)
			it.UID = "uid-in-tree"
			cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(&it).Build()
			e := InTreeExecutor{Client: cl, Reader: cl}
			if err := e.Abandon(t.Context(), stopped("")); err != nil {
				t.Fatal(err)
			}
			err := cl.Get(t.Context(), client.ObjectKey{Name: "widgets"}, &storagemigrationv1.StorageVersionMigration{})
			if exists := err == nil; exists != tc.wantExists {
				t.Errorf("in-tree migration exists: %v (%v), want %v", exists, err, tc.wantExists)
			}
		})
	}
	cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	if err := (InTreeExecutor{Client: cl, Reader: cl}).Abandon(t.Context(), stopped("")); err != nil {
		t.Errorf("abandoning none: %v", err)
	}
}
