package upgrade

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// TargetFileVersion is the only version of the target file format.
const TargetFileVersion = "v1"

// Target is what the target API server decodes: for each resource, the
// group versions it can read stored objects in.
type Target map[schema.GroupResource][]schema.GroupVersion

// TargetFile is the document read by `svm check-upgrade -f`:
//
//	version: v1                      # optional; v1 is the only format
//	decodable:
//	  widgets.example.com: [v2]      # RESOURCE[.GROUP]: versions
//	  deployments.apps: [v1]
//	  events: [v1, events.k8s.io/v1] # another group's version: GROUP/VERSION
//
// A version without a group is in the resource's group. Unknown fields are
// errors, so a misspelt key cannot silently check nothing.
type TargetFile struct {
	Version   string              `json:"version,omitempty"`
	Decodable map[string][]string `json:"decodable"`
}

// Add records that the target decodes versions of gr.
func (t Target) Add(gr schema.GroupResource, versions ...schema.GroupVersion) {
	for _, gv := range versions {
		if !slices.Contains(t[gr], gv) {
			t[gr] = append(t[gr], gv)
		}
	}
	slices.SortFunc(t[gr], func(a, b schema.GroupVersion) int { return compareVersions(gr.Group, a, b) })
}

// ParseDecodable parses one --decodable flag,
// RESOURCE[.GROUP]=VERSION[,VERSION...], into t.
func (t Target) ParseDecodable(flag string) error {
	name, list, ok := strings.Cut(flag, "=")
	if !ok {
		return fmt.Errorf("--decodable %q: want RESOURCE[.GROUP]=VERSION[,VERSION...]", flag)
	}
	if err := t.add(name, strings.Split(list, ",")); err != nil {
		return fmt.Errorf("--decodable %q: %w", flag, err)
	}
	return nil
}

// ParseFile parses a TargetFile (YAML or JSON) into t.
func (t Target) ParseFile(data []byte) error {
	var f TargetFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return err
	}
	if f.Version != "" && f.Version != TargetFileVersion {
		return fmt.Errorf("version %q: the only format is %s", f.Version, TargetFileVersion)
	}
	if len(f.Decodable) == 0 {
		return errors.New("decodable names no resources")
	}
	names := make([]string, 0, len(f.Decodable))
	for name := range f.Decodable {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := t.add(name, f.Decodable[name]); err != nil {
			return fmt.Errorf("decodable %q: %w", name, err)
		}
	}
	return nil
}

func (t Target) add(name string, versions []string) error {
	gr, err := parseResource(name)
	if err != nil {
		return err
	}
	var gvs []schema.GroupVersion
	for _, v := range versions {
		gv, err := parseVersion(gr.Group, strings.TrimSpace(v))
		if err != nil {
			return err
		}
		gvs = append(gvs, gv)
	}
	if len(gvs) == 0 {
		return errors.New("no versions")
	}
	t.Add(gr, gvs...)
	return nil
}

// parseResource reads RESOURCE[.GROUP] as svm names resources everywhere
// (StorageState names, svm migrate): the plural resource, then its group.
func parseResource(name string) (schema.GroupResource, error) {
	name = strings.TrimSpace(name)
	gr := schema.ParseGroupResource(name)
	if errs := validation.IsDNS1123Label(gr.Resource); len(errs) > 0 {
		return gr, fmt.Errorf("resource %q: %s", name, strings.Join(errs, "; "))
	}
	if gr.Group != "" {
		if errs := validation.IsDNS1123Subdomain(gr.Group); len(errs) > 0 {
			return gr, fmt.Errorf("group of %q: %s", name, strings.Join(errs, "; "))
		}
	}
	return gr, nil
}

// parseVersion reads VERSION (in group) or GROUP/VERSION.
func parseVersion(group, s string) (schema.GroupVersion, error) {
	gv := schema.GroupVersion{Group: group, Version: s}
	if g, v, ok := strings.Cut(s, "/"); ok {
		gv = schema.GroupVersion{Group: g, Version: v}
		if errs := validation.IsDNS1123Subdomain(g); len(errs) > 0 {
			return gv, fmt.Errorf("version %q: group: %s", s, strings.Join(errs, "; "))
		}
	}
	if errs := validation.IsDNS1035Label(gv.Version); len(errs) > 0 {
		return gv, fmt.Errorf("version %q: %s", s, strings.Join(errs, "; "))
	}
	return gv, nil
}

// compareVersions orders the versions of a resource in group: its own
// group's first, each group's by Kubernetes' priority, lowest first
// (v1alpha1, v1beta1, v1, v2).
func compareVersions(group string, a, b schema.GroupVersion) int {
	if (a.Group == group) != (b.Group == group) {
		if a.Group == group {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(a.Group, b.Group), kubeAwareCompare(a.Version, b.Version))
}
