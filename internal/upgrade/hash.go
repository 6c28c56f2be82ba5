package upgrade

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/svm-project/svm/internal/resources"
)

// hashIndex maps storage version hashes back to the group versions they
// were computed from.
//
// A hash is the first 8 bytes of SHA-256 over "group/version/kind" and
// cannot be inverted, only matched: svm computes the hash of every
// candidate and looks the persisted hash up. The candidates are the
// versions svm sees for the resource and, since a storage version need not
// be served (kube-apiserver v1.37 stores CustomResourceDefinitions as
// apiextensions.k8s.io/v1beta1 while serving only v1), every name of the
// form Kubernetes gives versions, v<N>, v<N>alpha<M> and v<N>beta<M>, for N
// and M up to maxVersionNumber. A match is exact: with 64-bit hashes a
// collision among a few hundred candidates has a probability near 1e-15.
type hashIndex map[string]schema.GroupVersion

// maxVersionNumber bounds the version names tried for a resource's group.
// No Kubernetes API group has gone past v2 or beta3 yet.
const maxVersionNumber = 9

func newHashIndex(kind string, group string, candidates []schema.GroupVersion) hashIndex {
	idx := hashIndex{}
	if kind == "" {
		return idx
	}
	add := func(gv schema.GroupVersion) {
		idx[resources.StorageVersionHash(gv.Group, gv.Version, kind)] = gv
	}
	for n := 1; n <= maxVersionNumber; n++ {
		add(schema.GroupVersion{Group: group, Version: fmt.Sprintf("v%d", n)})
		for m := 1; m <= maxVersionNumber; m++ {
			add(schema.GroupVersion{Group: group, Version: fmt.Sprintf("v%dalpha%d", n, m)})
			add(schema.GroupVersion{Group: group, Version: fmt.Sprintf("v%dbeta%d", n, m)})
		}
	}
	// Seen versions last, so that they name a hash should two candidates
	// ever share one.
	for _, gv := range candidates {
		add(gv)
	}
	return idx
}

func (idx hashIndex) resolve(hash string) (schema.GroupVersion, bool) {
	gv, ok := idx[hash]
	return gv, ok
}

// kubeAwareCompare orders version names by Kubernetes' priority, lowest
// first: alpha, then beta, then GA (v1alpha1, v1beta1, v1beta2, v1, v2).
func kubeAwareCompare(a, b string) int { return version.CompareKubeAwareVersionStrings(a, b) }
