package managedfields

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// fieldsOf is what the field manager sees of an object in one version:
// every node (a field, a map, a list item) as a path, and which of them
// are leaves (a scalar, an atomic list or map, an empty one).
type fieldsOf struct {
	nodes, leaves *fieldpath.Set
}

// newFieldsOf builds fieldsOf from a typed value's field set, which holds
// every leaf and list item but not the maps in between.
func newFieldsOf(set *fieldpath.Set) fieldsOf {
	f := fieldsOf{nodes: fieldpath.NewSet(), leaves: fieldpath.NewSet()}
	set.Iterate(func(p fieldpath.Path) {
		for i := 1; i <= len(p); i++ {
			f.nodes.Insert(p[:i].Copy())
		}
	})
	f.nodes.Iterate(func(p fieldpath.Path) {
		if !hasUnder(f.nodes, p) {
			f.leaves.Insert(p.Copy())
		}
	})
	return f
}

// hasUnder reports whether set holds a path strictly under p.
func hasUnder(set *fieldpath.Set, p fieldpath.Path) bool {
	cur := set
	for _, pe := range p {
		if cur = cur.WithPrefix(pe); cur == nil {
			return false
		}
	}
	return !cur.Empty()
}

// isIdentity reports whether p is a path no conversion moves: apiVersion,
// kind, and metadata but its labels and annotations (the API server
// refuses a conversion webhook's change to any other metadata).
func isIdentity(p fieldpath.Path) bool {
	if len(p) == 0 || p[0].FieldName == nil {
		return false
	}
	switch *p[0].FieldName {
	case "apiVersion", "kind":
		return true
	case "metadata":
		if len(p) < 3 || p[1].FieldName == nil {
			return true
		}
		return *p[1].FieldName != "labels" && *p[1].FieldName != "annotations"
	}
	return false
}

// isKey reports whether p is a key field of the list item it ends in:
// changing it would make the item another one.
func isKey(p fieldpath.Path) bool {
	if len(p) < 2 || p[len(p)-1].FieldName == nil || p[len(p)-2].Key == nil {
		return false
	}
	name := *p[len(p)-1].FieldName
	return slices.ContainsFunc(*p[len(p)-2].Key, func(f value.Field) bool { return f.Name == name })
}

// change sets the leaf at p in object to another value of the same JSON
// type, so that a conversion of the object shows where the leaf goes; set
// items change their value. allowed, if not empty, are the values the
// schema allows there (its enum), one of which it then takes. It fails
// when there is no such leaf or no other value to give it.
func change(object map[string]any, p fieldpath.Path, allowed []any) error {
	if len(p) == 0 {
		return fmt.Errorf("empty path")
	}
	parent, ok := at(object, p[:len(p)-1])
	if !ok {
		return fmt.Errorf("%s: not in the object", p)
	}
	last := p[len(p)-1]
	switch {
	case last.FieldName != nil:
		m, ok := parent.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: not in the object", p)
		}
		v, ok := m[*last.FieldName]
		if !ok {
			return fmt.Errorf("%s: not in the object", p)
		}
		nv, err := pick(v, allowed, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		m[*last.FieldName] = nv
		return nil
	case last.Value != nil, last.Index != nil:
		return changeItem(parent, p, allowed)
	}
	return fmt.Errorf("%s: a list item is not a leaf", p)
}

// changeItem changes the list item p ends in: a set's value (to one the
// set does not hold) or an item found by its index.
func changeItem(parent any, p fieldpath.Path, allowed []any) error {
	l, ok := parent.([]any)
	if !ok {
		return fmt.Errorf("%s: not in the object", p)
	}
	i := itemIndex(l, p[len(p)-1])
	if i < 0 {
		return fmt.Errorf("%s: not in the object", p)
	}
	var taken func(any) bool
	if p[len(p)-1].Value != nil {
		taken = func(nv any) bool { return slices.ContainsFunc(l, func(v any) bool { return same(v, nv) }) }
	}
	nv, err := pick(l[i], allowed, taken)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	l[i] = nv
	return nil
}

// pick is another value for v: the first of allowed that is not v, when
// the schema names allowed values, else another; taken, if set, rules
// values out (a set's items).
func pick(v any, allowed []any, taken func(any) bool) (any, error) {
	if len(allowed) > 0 {
		for _, a := range allowed {
			if !same(a, v) && (taken == nil || !taken(a)) {
				return a, nil
			}
		}
		return nil, fmt.Errorf("its schema allows no other value")
	}
	nv, err := another(v)
	for err == nil && taken != nil && taken(nv) {
		nv, err = another(nv)
	}
	return nv, err
}

// same reports whether a and b are the same JSON value: an enum read from
// an OpenAPI document holds numbers as float64, an object as int64.
func same(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// another is a value of the same JSON type as v, other than v; for a list
// or a map (an atomic one, owned whole), a copy with its first scalar
// changed.
func another(v any) (any, error) {
	switch v := v.(type) {
	case bool:
		return !v, nil
	case int64:
		return v + 1, nil
	case float64:
		return v + 1, nil
	case string:
		return nudge(v), nil
	case []any:
		if len(v) == 0 {
			return nil, fmt.Errorf("an empty list has no value to change")
		}
		out := slices.Clone(v)
		first, err := another(v[0])
		out[0] = first
		return out, err
	case map[string]any:
		if len(v) == 0 {
			return nil, fmt.Errorf("an empty map has no value to change")
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = x
		}
		first, err := another(v[keys[0]])
		out[keys[0]] = first
		return out, err
	}
	return nil, fmt.Errorf("a %T value cannot be changed", v)
}

// nudge changes a string's last digit, or else its last letter, to its
// neighbour of the same kind, keeping its length and the kinds of its
// characters: a value valid for a pattern or a format (a name, a quantity,
// a time) most likely stays valid. A string with neither gets an "x".
func nudge(s string) string {
	b := []byte(s)
	for _, kinds := range [][2]byte{{'0', '9'}, {'a', 'z'}} {
		for i := len(b) - 1; i >= 0; i-- {
			lo, hi := kinds[0], kinds[1]
			if kinds[0] == 'a' && b[i] >= 'A' && b[i] <= 'Z' {
				lo, hi = 'A', 'Z'
			}
			if b[i] < lo || b[i] > hi {
				continue
			}
			if b[i] == hi {
				b[i]--
			} else {
				b[i]++
			}
			return string(b)
		}
	}
	return s + "x"
}

// at returns the value at p in object, and whether object has it.
func at(object any, p fieldpath.Path) (any, bool) {
	cur := object
	for _, pe := range p {
		switch {
		case pe.FieldName != nil:
			m, ok := cur.(map[string]any)
			if !ok {
				return nil, false
			}
			if cur, ok = m[*pe.FieldName]; !ok {
				return nil, false
			}
		default:
			l, ok := cur.([]any)
			if !ok {
				return nil, false
			}
			i := itemIndex(l, pe)
			if i < 0 {
				return nil, false
			}
			cur = l[i]
		}
	}
	return cur, true
}

// itemIndex finds the item of l that pe names: by its keys, its value or
// its index; -1 when there is none.
func itemIndex(l []any, pe fieldpath.PathElement) int {
	switch {
	case pe.Key != nil:
		return slices.IndexFunc(l, func(item any) bool {
			m, ok := item.(map[string]any)
			if !ok {
				return false
			}
			for _, f := range *pe.Key {
				v, ok := m[f.Name]
				if !ok || !value.Equals(value.NewValueInterface(v), f.Value) {
					return false
				}
			}
			return true
		})
	case pe.Value != nil:
		return slices.IndexFunc(l, func(item any) bool { return value.Equals(value.NewValueInterface(item), *pe.Value) })
	case pe.Index != nil && *pe.Index >= 0 && *pe.Index < len(l):
		return *pe.Index
	}
	return -1
}
