package resources

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// DiscoverServed reads every group version the server serves, for Resolve.
// Each group's lists come in the order of preference, the preferred version
// first, so that Resolve picks that version as kubectl does. Groups whose
// discovery failed are returned, not an error: Resolve decides which names
// they leave in doubt. Use a kubeclients.Set's discovery client, or shared
// storage cannot be told (see the package comment).
func DiscoverServed(disc discovery.DiscoveryInterface) ([]*metav1.APIResourceList, map[schema.GroupVersion]error, error) {
	groups, lists, err := disc.ServerGroupsAndResources()
	failed, partial := discovery.GroupDiscoveryFailedErrorGroups(err)
	if err != nil && !partial {
		return nil, nil, fmt.Errorf("discover resources: %w", err)
	}
	byGV := make(map[string]*metav1.APIResourceList, len(lists))
	for _, l := range lists {
		byGV[l.GroupVersion] = l
	}
	ordered := make([]*metav1.APIResourceList, 0, len(lists))
	take := func(gv string) {
		if l, ok := byGV[gv]; ok {
			ordered = append(ordered, l)
			delete(byGV, gv)
		}
	}
	for _, g := range groups {
		take(g.PreferredVersion.GroupVersion)
		for _, v := range g.Versions {
			take(v.GroupVersion)
		}
	}
	for _, l := range lists { // lists of no group, should a server send any
		take(l.GroupVersion)
	}
	return ordered, failed, nil
}

// ResolveAll resolves every argument with Resolve and returns the resources
// once per storage, in the order named. It returns an error, one line per
// argument that does not resolve, if any does not: a migration of some of
// the resources named is not what was asked for.
func ResolveAll(lists []*metav1.APIResourceList, failed map[schema.GroupVersion]error, args []string) ([]Resource, error) {
	var out []Resource
	var errs []error
	for _, arg := range args {
		r, err := Resolve(lists, failed, arg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Naming one storage twice (events events.events.k8s.io) asks
		// for one migration: a second would rewrite every object again.
		if !slices.ContainsFunc(out, func(o Resource) bool { return sameStorage(o, r) }) {
			out = append(out, r)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// Resolve finds the one resource arg names, reading it as kubectl does:
// RESOURCE, RESOURCE.GROUP or RESOURCE.VERSION.GROUP (where GROUP may be
// empty: pods.v1. is the core group's), RESOURCE being a plural, singular,
// short name or kind, in any case. A GROUP that names no group holding the
// resource matches the groups it begins (deploy.apps, storageclass.storage).
// Without a VERSION the resource is taken in its group's preferred version.
//
// lists are what the server serves, each group's versions in order of
// preference (as DiscoverServed returns them), and failed the group
// versions discovery could not read.
//
// A migrator must not guess, so Resolve never picks among candidates as
// kubectl does (by group priority, plural before short name before kind):
// an argument that names more than one group-resource is an error naming
// them all. Two exceptions, where there is no choice to make: candidates
// that cannot be listed and patched are not candidates for a migration
// when another is (pods.metrics.k8s.io is no alternative to pods), and
// candidates that all report one storage are one storage (events and
// events.events.k8s.io): either migration rewrites the same objects, and
// the one Migratable would keep is returned. A group whose discovery failed
// may hold another candidate, so an argument that could name a resource in
// it is an error too.
func Resolve(lists []*metav1.APIResourceList, failed map[schema.GroupVersion]error, arg string) (Resource, error) {
	var found []candidate
	var doubt []schema.GroupVersion
	for _, q := range parseArg(arg) {
		matches := q.match(lists, false)
		if q.group != nil && q.version == "" && len(matches) == 0 {
			// kubectl falls back to groups the given one begins only
			// when no resource of that very group matches.
			matches = q.match(lists, true)
			doubt = append(doubt, q.inDoubt(failed, true)...)
		} else {
			doubt = append(doubt, q.inDoubt(failed, false)...)
		}
		for _, m := range matches {
			// A resource.version.group reading comes first and keeps
			// the version it names.
			if !slices.ContainsFunc(found, func(c candidate) bool { return c.res.GroupResource() == m.res.GroupResource() }) {
				found = append(found, m)
			}
		}
	}
	slices.SortFunc(found, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.res.Group, b.res.Group), cmp.Compare(a.res.Resource, b.res.Resource))
	})
	slices.SortFunc(doubt, func(a, b schema.GroupVersion) int { return cmp.Compare(a.String(), b.String()) })
	doubt = slices.Compact(doubt)

	if len(doubt) > 0 {
		return Resource{}, discoveryFailed(lists, failed, arg, found, doubt)
	}
	switch len(found) {
	case 0:
		return Resource{}, fmt.Errorf("resource %q: the server does not serve it", arg)
	case 1:
		// A lone candidate is returned even when it cannot be migrated:
		// the migration then says why, as it does for any resource.
		return found[0].res, nil
	}
	pool := slices.DeleteFunc(slices.Clone(found), func(c candidate) bool { return !c.migratable })
	if len(pool) == 1 || len(pool) > 1 && allOneStorage(pool) {
		return pool[0].res, nil
	}
	names := make([]string, len(found))
	for i, c := range found {
		names[i] = DisplayName(c.res.GroupResource())
	}
	return Resource{}, fmt.Errorf("resource %q is ambiguous: it names %s; name one in full", arg, enumerate(names))
}

// ObjectKey names an object as svm prints it: NAMESPACE/NAME, or NAME
// for a cluster-scoped one.
func ObjectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// DisplayName is how svm names a group-resource to users: resource.group,
// or the plural alone in the core group, as kubectl takes it back.
func DisplayName(gr schema.GroupResource) string {
	if gr.Group == "" {
		return gr.Resource
	}
	return gr.Resource + "." + gr.Group
}

type candidate struct {
	res        Resource
	migratable bool
}

// query is one reading of an argument.
type query struct {
	name    string  // lower case
	group   *string // nil: any group
	version string  // "": any version, preferred first
}

// parseArg reads arg as kubectl's schema.ParseResourceArg does: with two
// dots or more, both as resource.version.group and as resource.group.
func parseArg(arg string) []query {
	name, group, ok := strings.Cut(arg, ".")
	name = strings.ToLower(name)
	if !ok {
		return []query{{name: name}}
	}
	var qs []query
	if version, vgroup, ok := strings.Cut(group, "."); ok && version != "" {
		qs = append(qs, query{name: name, group: &vgroup, version: version})
	}
	return append(qs, query{name: name, group: &group})
}

// match returns the resources q names, each group-resource once, in its
// first version listed. With prefix, q's group matches the groups it
// begins instead of its own.
func (q query) match(lists []*metav1.APIResourceList, prefix bool) []candidate {
	var out []candidate
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil || !q.holds(gv, prefix) {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !names(r, q.name) {
				continue
			}
			gvr := gv.WithResource(r.Name)
			if slices.ContainsFunc(out, func(c candidate) bool { return c.res.GroupResource() == gvr.GroupResource() }) {
				continue // a less preferred version
			}
			out = append(out, candidate{
				res:        Resource{GroupVersionResource: gvr, Kind: r.Kind, StorageVersionHash: r.StorageVersionHash},
				migratable: slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "patch"),
			})
		}
	}
	return out
}

// holds tells whether gv is a group version q may name a resource in.
func (q query) holds(gv schema.GroupVersion, prefix bool) bool {
	switch {
	case q.group == nil:
		return true
	case q.version != "" && gv.Version != q.version:
		return false
	case prefix:
		return strings.HasPrefix(gv.Group, *q.group)
	default:
		return gv.Group == *q.group
	}
}

// inDoubt returns the failed group versions that may hold a resource q
// names.
func (q query) inDoubt(failed map[schema.GroupVersion]error, prefix bool) []schema.GroupVersion {
	var out []schema.GroupVersion
	for gv := range failed {
		if q.holds(gv, prefix) { // a prefix holds the group itself too
			out = append(out, gv)
		}
	}
	return out
}

// names tells whether r is called name (lower case) by its plural,
// singular, a short name or its kind. Resource names are lower case by
// validation; kubectl lower-cases what it is given, and svm does for every
// form, so that Widget, widget and WIDGETS are all one resource.
func names(r metav1.APIResource, name string) bool {
	if name == "" { // or an empty singular would match
		return false
	}
	return name == strings.ToLower(r.Name) ||
		name == strings.ToLower(r.SingularName) ||
		name == strings.ToLower(r.Kind) ||
		slices.ContainsFunc(r.ShortNames, func(s string) bool { return name == strings.ToLower(s) })
}

func sameStorage(a, b Resource) bool {
	return a.GroupResource() == b.GroupResource() ||
		a.StorageVersionHash != "" && a.StorageVersionHash == b.StorageVersionHash
}

// allOneStorage tells whether every candidate reports the same storage. A
// candidate without a hash may be stored anywhere.
func allOneStorage(cs []candidate) bool {
	for _, c := range cs {
		if c.res.StorageVersionHash == "" || c.res.StorageVersionHash != cs[0].res.StorageVersionHash {
			return false
		}
	}
	return true
}

// discoveryFailed explains that groups discovery could not read may hold
// another candidate for arg and, where one resource was found, the name
// that resolves it without them.
func discoveryFailed(lists []*metav1.APIResourceList, failed map[schema.GroupVersion]error, arg string, found []candidate, doubt []schema.GroupVersion) error {
	gvs := make([]string, len(doubt))
	for i, gv := range doubt {
		gvs[i] = gv.String()
	}
	too := ""
	if len(found) > 0 {
		too = " too"
	}
	msg := fmt.Sprintf("resource %q: discovery failed for %s, which may serve it%s; retry", arg, enumerate(gvs), too)
	if len(found) == 1 {
		r := found[0].res
		for _, full := range []string{DisplayName(r.GroupResource()), r.Resource + "." + r.Version + "." + r.Group} {
			if full == arg || !strings.Contains(full, ".") {
				continue
			}
			if got, err := Resolve(lists, failed, full); err == nil && got.GroupResource() == r.GroupResource() {
				return fmt.Errorf("%s, or name it in full as %s", msg, full)
			}
		}
	}
	return errors.New(msg)
}

// enumerate joins names as a sentence does: a, b and c.
func enumerate(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
