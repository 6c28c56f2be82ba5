package v1alpha1

import "k8s.io/apimachinery/pkg/runtime/schema"

// GroupResource is the resource r names, its version aside: what a
// migration of r migrates, whichever version it reaches it through.
func (r GroupVersionResource) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: r.Group, Resource: r.Resource}
}
