package storagestate

import (
	"context"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/svm-project/svm/internal/fingerprint"
	"github.com/svm-project/svm/internal/scheme"
)

// widgetsCRD is the widgets' CRD at generation, storing storage.
func widgetsCRD(generation int64, storage string) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com", UID: "uid-1", Generation: generation},
		Spec:       apiextensionsv1.CustomResourceDefinitionSpec{Group: "example.com", Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets"}},
	}
	for _, v := range []string{"v1", "v2"} {
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v, Served: true, Storage: v == storage})
	}
	return crd
}

// TestSeeingGenerationsBetweenRounds: a round reads the widgets' CRD at
// generation 5, two spec changes follow before the next round reads it at
// 7. Seen by the watch as they come, a generation that kept the storage
// version leaves the storage the same; one that flipped it (and the next
// flipped it back) is a move; unseen, the gap is a possible move.
func TestSeeingGenerationsBetweenRounds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		storage6  string
		watchSees bool
		same      bool
	}{
		{name: "a spec change seen", storage6: "v2", watchSees: true, same: true},
		{name: "a flip and a flip back seen", storage6: "v1", watchSees: true, same: false},
		{name: "a spec change unseen", storage6: "v2", watchSees: false, same: false},
		{name: "a flip and a flip back unseen", storage6: "v1", watchSees: false, same: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).
				WithIndex(&apiextensionsv1.CustomResourceDefinition{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
				Build()
			c := &Controller{Reader: cl, Epochs: fingerprint.NewEpochs(), Clock: clock.RealClock{}}
			h := c.seeingGenerations(handler.Funcs{})
			first := c.Epochs.Of(widgetsCRD(5, "v2"), nil).Value
			for _, next := range []*apiextensionsv1.CustomResourceDefinition{widgetsCRD(6, tc.storage6), widgetsCRD(7, "v2")} {
				var live apiextensionsv1.CustomResourceDefinition
				switch err := cl.Get(t.Context(), client.ObjectKeyFromObject(next), &live); {
				case err == nil:
					live.Spec, live.Generation = next.Spec, next.Generation
					if err := cl.Update(t.Context(), &live); err != nil {
						t.Fatal(err)
					}
				default:
					if err := cl.Create(t.Context(), next.DeepCopy()); err != nil {
						t.Fatal(err)
					}
				}
				if tc.watchSees {
					old := widgetsCRD(next.Generation-1, "")
					h.Update(t.Context(), event.UpdateEvent{ObjectOld: old, ObjectNew: next}, nil)
				}
			}
			second := c.Epochs.Of(widgetsCRD(7, "v2"), nil).Value
			if got := fingerprint.SameStorage(first, second); got != tc.same {
				t.Errorf("read at 5 %q, at 7 %q: same storage %v, want %v", first, second, got, tc.same)
			}
		})
	}
}

// countingReader counts the lists it passes on.
type countingReader struct {
	client.Reader
	lists int
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.lists++
	return r.Reader.List(ctx, list, opts...)
}

// TestSeeingGenerationsReadsOnlySpecChanges: an update that leaves the
// generation alone (storedVersions, conditions) reads nothing; one that
// moves it reads the CRD once.
func TestSeeingGenerationsReadsOnlySpecChanges(t *testing.T) {
	cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithIndex(&apiextensionsv1.CustomResourceDefinition{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
		WithObjects(widgetsCRD(6, "v2")).Build()
	reader := &countingReader{Reader: cl}
	c := &Controller{Reader: reader, Epochs: fingerprint.NewEpochs(), Clock: clock.RealClock{}}
	h := c.seeingGenerations(handler.Funcs{})
	h.Update(t.Context(), event.UpdateEvent{ObjectOld: widgetsCRD(5, "v2"), ObjectNew: widgetsCRD(5, "v2")}, nil)
	if reader.lists != 0 {
		t.Errorf("a status-only update read the CRD %d times, want none", reader.lists)
	}
	h.Update(t.Context(), event.UpdateEvent{ObjectOld: widgetsCRD(5, "v2"), ObjectNew: widgetsCRD(6, "v2")}, nil)
	if reader.lists != 1 {
		t.Errorf("a spec change read the CRD %d times, want once", reader.lists)
	}
}

// TestGenerationsSeenAreTheWatchsFirstDelivery: the time a CRD's
// generation is seen is when the watch first delivered it, kept through
// updates that leave the generation alone, and it answers only for that
// generation of that CRD: a later generation, a CRD created again under
// the name, or one deleted is not seen.
func TestGenerationsSeenAreTheWatchsFirstDelivery(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	c := &Controller{Reader: fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(), Clock: clk}
	h := c.notingGenerations()
	at := func(crd *apiextensionsv1.CustomResourceDefinition) time.Time { return c.seen.of(crd) }

	h.Create(t.Context(), event.CreateEvent{Object: widgetsCRD(1, "v1")}, nil)
	clk.Step(10 * time.Second)
	h.Update(t.Context(), event.UpdateEvent{ObjectOld: widgetsCRD(1, "v1"), ObjectNew: widgetsCRD(1, "v1")}, nil)
	if got := at(widgetsCRD(1, "v1")); !got.Equal(t0) {
		t.Errorf("generation 1 seen at %v, want %v (its creation, not a later status update)", got, t0)
	}
	clk.Step(10 * time.Second)
	h.Update(t.Context(), event.UpdateEvent{ObjectOld: widgetsCRD(1, "v1"), ObjectNew: widgetsCRD(2, "v2")}, nil)
	if got := at(widgetsCRD(2, "v2")); !got.Equal(t0.Add(20 * time.Second)) {
		t.Errorf("generation 2 seen at %v, want %v", got, t0.Add(20*time.Second))
	}
	if got := at(widgetsCRD(1, "v1")); !got.IsZero() {
		t.Errorf("generation 1, read after 2 was delivered: seen at %v, want not seen", got)
	}
	other := widgetsCRD(2, "v2")
	other.UID = "uid-2"
	if got := at(other); !got.IsZero() {
		t.Errorf("a CRD created again under the name: seen at %v, want not seen", got)
	}
	h.Delete(t.Context(), event.DeleteEvent{Object: widgetsCRD(2, "v2")}, nil)
	if got := at(widgetsCRD(2, "v2")); !got.IsZero() {
		t.Errorf("a deleted CRD: seen at %v, want not seen", got)
	}
}
