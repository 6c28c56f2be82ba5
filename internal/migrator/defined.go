package migrator

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// What the field manager drops by design is what it cannot convert to,
// and that is not what discovery lists. A custom resource's field manager
// converts to every version of its CRD's spec.versions, served or not
// (the apiextensions-apiserver builds its type and version converters
// from all of them): an entry naming a version defined with served: false
// is converted, through the conversion webhook, like any other, and when
// that fails, kube-apiserver before 1.37 clears every entry. Discovery
// does not list such a version, so the engine adds the CRD's versions to
// the ones discovery lists (servedSet), or, when it cannot read the CRD,
// tells nothing (nil), and every version of the group then counts.

// crdsPath is where the API server lists CustomResourceDefinitions.
const crdsPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

// crdVersionsList is the little of a list of CustomResourceDefinitions
// the engine reads: the names of each one's versions.
type crdVersionsList struct {
	Items []struct {
		Spec struct {
			Versions []struct {
				Name string `json:"name"`
			} `json:"versions"`
		} `json:"spec"`
	} `json:"items"`
}

// builtInGroup reports whether kube-apiserver serves group itself: no CRD
// defines its resources. (Its apiextensions.k8s.io and
// apiregistration.k8s.io are not in client-go's scheme: their resources
// are looked up and no CRD is found.)
func builtInGroup(group string) bool {
	return group == "" || clientgoscheme.Scheme.IsGroupRegistered(group)
}

// definedVersions are the apiVersions, served or not, that the CRD of the
// resource defines (<resource>.<group>): none, and no error, for a
// built-in resource, one no CRD defines (an aggregated API server's), or
// an API server that does not serve CRDs (404). A list by name, since
// svm may list CRDs, not get them; retried as discovery is.
func (r *run) definedVersions(ctx context.Context) ([]string, error) {
	res := r.req.Resource
	if builtInGroup(res.Group) {
		return nil, nil
	}
	name := res.Resource + "." + res.Group
	var body []byte
	err := r.retry(ctx, "", func(ctx context.Context) error {
		var err error
		body, err = r.m.rest.Get().AbsPath(crdsPath).
			Param("fieldSelector", "metadata.name="+name).
			SetHeader("Accept", "application/json").
			DoRaw(ctx)
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("list the CRD %s: %w", name, err)
	}
	var l crdVersionsList
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("read the CRD %s: %w", name, err)
	}
	var defined []string
	for _, crd := range l.Items {
		for _, v := range crd.Spec.Versions {
			defined = append(defined, schema.GroupVersion{Group: res.Group, Version: v.Name}.String())
		}
	}
	return defined, nil
}

// servedSet is the set of apiVersions the field manager converts entries
// to: those discovery lists (groups) and those the resource's CRD defines.
func servedSet(groups *metav1.APIGroupList, defined []string) map[string]bool {
	served := map[string]bool{}
	for _, group := range groups.Groups {
		for _, v := range group.Versions {
			served[v.GroupVersion] = true
		}
	}
	for _, v := range defined {
		served[v] = true
	}
	return served
}
