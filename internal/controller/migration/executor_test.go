package migration

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
