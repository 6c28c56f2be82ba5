package upgrade

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1beta1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationv1beta1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1beta1"

	"github.com/svm-project/svm/internal/resources"
)

// kubernetesAPI holds every type kube-apiserver serves itself, each
// version with its lifecycle: k8s.io/api's, and the CRDs' and APIServices'
// that live in their own modules.
var kubernetesAPI = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme, apiextensionsv1beta1.AddToScheme,
		apiregistrationv1.AddToScheme, apiregistrationv1beta1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// A Kubernetes release decodes stored objects of a built-in resource in
// the versions it still serves: a prerelease version stops being decodable
// in the release that removes it, and objects left in it can no longer be
// read there. k8s.io/api records that removal on every prerelease type
// (APILifecycleRemoved), so the releases svm knows are those up to the
// k8s.io/api it is built with; a removal decided later is not known.

// Release is a Kubernetes minor, such as 1.39.
type Release struct{ Major, Minor int }

func (r Release) String() string { return fmt.Sprintf("%d.%d", r.Major, r.Minor) }

// Before reports whether r is an earlier minor than o.
func (r Release) Before(o Release) bool {
	return r.Major < o.Major || r.Major == o.Major && r.Minor < o.Minor
}

// ParseRelease reads a minor, 1.39 or v1.39; a patch (v1.39.2) is
// accepted and ignored: what a release decodes does not change in patches.
func ParseRelease(s string) (Release, error) {
	v, err := version.ParseGeneric(strings.TrimSpace(s))
	if err != nil {
		return Release{}, fmt.Errorf("release %q: want a Kubernetes minor such as 1.39 or v1.39", s)
	}
	return Release{Major: int(v.Major()), Minor: int(v.Minor())}, nil
}

// ReleaseFromServer reads the major and minor a server's /version reports
// ("1", "37+").
func ReleaseFromServer(major, minor string) (Release, error) {
	ma, err1 := strconv.Atoi(strings.TrimSuffix(major, "+"))
	mi, err2 := strconv.Atoi(strings.TrimSuffix(minor, "+"))
	if err1 != nil || err2 != nil {
		return Release{}, fmt.Errorf("the server reports version %q.%q, which is not a Kubernetes release", major, minor)
	}
	return Release{Major: ma, Minor: mi}, nil
}

// KnownThrough is the last Kubernetes release whose removals svm knows:
// that of the k8s.io/api it is built with (v0.37.x records those decided
// by 1.37). A test keeps it equal to go.mod's.
var KnownThrough = Release{Major: 1, Minor: 37}

// BuiltIn tells whether group is one of the API groups kube-apiserver
// serves itself. Another group is a CRD's or an aggregated API server's.
func BuiltIn(group string) bool {
	return builtInGroups()[group]
}

var builtInGroups = sync.OnceValue(func() map[string]bool {
	groups := map[string]bool{}
	for gvk := range kubernetesAPI.AllKnownTypes() {
		groups[gvk.Group] = true
	}
	return groups
})

// removed is what k8s.io/api generates on prerelease types: the release
// that no longer serves them.
type removed interface{ APILifecycleRemoved() (major, minor int) }

// Decodes are the versions of group in which release r decodes objects of
// kind: every version of k8s.io/api with that kind that is not removed at
// or before r. A GA version has no lifecycle and is never removed. (A
// version a server still writes after its removal from serving, as CRDs
// are written as apiextensions.k8s.io/v1beta1, is added by
// FillFromRelease.)
func (r Release) Decodes(group, kind string) []schema.GroupVersion {
	var out []schema.GroupVersion
	for gvk := range kubernetesAPI.AllKnownTypes() {
		if gvk.Group != group || gvk.Kind != kind || gvk.Version == runtime.APIVersionInternal {
			continue
		}
		if gone, ok := RemovedIn(gvk); ok && !r.Before(gone) {
			continue
		}
		out = append(out, gvk.GroupVersion())
	}
	slices.SortFunc(out, func(a, b schema.GroupVersion) int { return compareVersions(group, a, b) })
	return out
}

// RemovedIn is the release that stops serving gvk, as k8s.io/api records
// it; ok is false for a GA version or a kind it does not know.
func RemovedIn(gvk schema.GroupVersionKind) (Release, bool) {
	obj, err := kubernetesAPI.New(gvk)
	if err != nil {
		return Release{}, false
	}
	rm, ok := obj.(removed)
	if !ok {
		return Release{}, false
	}
	major, minor := rm.APILifecycleRemoved()
	return Release{major, minor}, major > 0
}

// writtenAfterRemoval is the version of kind the server writes (hash,
// discovery's storageVersionHash), when that version was removed from
// serving at or before server's release: Kubernetes keeps decoding a
// version it still stores in, so the target is taken to decode it too.
func writtenAfterRemoval(server Release, group, kind, hash string) (schema.GroupVersion, bool) {
	for gvk := range kubernetesAPI.AllKnownTypes() {
		if gvk.Group != group || gvk.Kind != kind || gvk.Version == runtime.APIVersionInternal {
			continue
		}
		if resources.StorageVersionHash(group, gvk.Version, kind) != hash {
			continue
		}
		if gone, ok := RemovedIn(gvk); ok && !server.Before(gone) {
			return gvk.GroupVersion(), true
		}
	}
	return schema.GroupVersion{}, false
}

// FillFromRelease makes the target the Kubernetes release to, on a cluster
// whose API server runs server. Every resource the server stores (one
// with a storage version hash in discovery or a StorageState) is checked,
// except those already in in.Target (given by hand, which wins):
//   - a built-in resource against the versions to decodes (Decodes);
//   - a custom resource against its CRD's versions, which an upgrade of
//     Kubernetes does not change;
//   - a resource of an aggregated API server, whose versions are its own,
//     is unknown (TargetUnknown).
//
// to must not be before server: svm knows which versions later releases
// stop reading, not which versions earlier ones did not read yet.
func (in *Input) FillFromRelease(to, server Release) error {
	if to.Before(server) {
		return fmt.Errorf("the target %s is older than the server (%s): svm checks upgrades, not downgrades", to, server)
	}
	if in.Target == nil {
		in.Target = Target{}
	}
	in.TargetUnknown = map[schema.GroupResource]string{}
	in.Release = &ReleaseTarget{To: to.String(), Server: server.String(), KnownThrough: KnownThrough.String(), Limits: []string{}}
	if KnownThrough.Before(to) {
		in.Release.Limits = append(in.Release.Limits, fmt.Sprintf(
			"svm knows the removals Kubernetes decided by %s (the k8s.io/api it is built with): a version that %s removes by a later decision is taken as decodable; read %s's release notes, or use an svm built with its k8s.io/api",
			KnownThrough, to, to))
	}
	in.Release.Limits = append(in.Release.Limits,
		"an aggregated API server's versions are its own: its resources are unknown unless given with --decodable")

	crds := map[schema.GroupResource]bool{}
	for _, c := range in.CRDs {
		gr := schema.GroupResource{Group: c.Spec.Group, Resource: c.Spec.Names.Plural}
		crds[gr] = true
		if _, given := in.Target[gr]; given {
			continue
		}
		for _, v := range c.Spec.Versions {
			in.Target.Add(gr, schema.GroupVersion{Group: c.Spec.Group, Version: v.Name})
		}
	}
	states := map[schema.GroupResource]bool{}
	for _, s := range in.StorageStates {
		states[schema.GroupResource{Group: s.Spec.Resource.Group, Resource: s.Spec.Resource.Resource}] = true
	}
	// Resources sharing storage (events and events.events.k8s.io) are
	// checked once, as svm migrates them: the one in the group that sorts
	// first.
	discovered := slices.SortedFunc(slices.Values(in.Discovery.Resources), func(a, b DiscoveredResource) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Resource, b.Resource))
	})
	sharing := map[string]bool{}
	for _, d := range discovered {
		gr := d.GroupResource
		if d.StorageVersionHash != "" {
			if sharing[d.StorageVersionHash] {
				continue
			}
			sharing[d.StorageVersionHash] = true
		}
		if _, given := in.Target[gr]; given || crds[gr] {
			continue
		}
		if d.StorageVersionHash == "" && !states[gr] {
			continue // not stored: nothing to read after the upgrade
		}
		if !BuiltIn(gr.Group) {
			in.TargetUnknown[gr] = "served by an aggregated API server, whose versions a Kubernetes upgrade does not decide: give them with --decodable"
			continue
		}
		decodes := to.Decodes(gr.Group, d.Kind)
		if gv, ok := writtenAfterRemoval(server, gr.Group, d.Kind, d.StorageVersionHash); ok {
			decodes = append(decodes, gv)
		}
		if len(decodes) == 0 {
			in.TargetUnknown[gr] = fmt.Sprintf("the k8s.io/api svm is built with has no %s in %s: what %s decodes is unknown",
				d.Kind, groupName(gr.Group), to)
			continue
		}
		in.Target.Add(gr, decodes...)
	}
	return nil
}

func groupName(group string) string {
	if group == "" {
		return "the core group"
	}
	return group
}
