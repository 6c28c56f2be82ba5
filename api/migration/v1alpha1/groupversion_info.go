package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of svm's API objects.
	GroupVersion = schema.GroupVersion{Group: "migration.k8s.io", Version: "v1alpha1"}

	// SchemeBuilder registers svm's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds svm's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
