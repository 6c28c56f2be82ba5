package etcdvalue

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// RegistryPrefix is where kube-apiserver keeps its objects in etcd (its
// default --etcd-prefix, /registry, and a slash).
const RegistryPrefix = "/registry/"

// The labels of values that are not encrypted under a named key, and the
// resource of keys that belong to none.
const (
	// Identity labels values stored in plain text, JSON or protobuf:
	// written by the identity provider, or by an API server with no
	// provider for their resource.
	Identity = "identity"
	// Unrecognised labels values that are neither plain JSON or protobuf
	// nor encrypted under a well-formed prefix. Nothing is known of them,
	// not even that they do not need a given key.
	Unrecognised = "unrecognised"
	// OtherResource is the resource of keys that are not shaped like
	// RegistryPrefix<resource>/<name> or RegistryPrefix<group>/<resource>/<name>.
	OtherResource = "<other>"
)

// maxLabelField bounds each field of an encryption label. Provider and key
// names are short; a longer field is a corrupted value, and printing it
// could print the bytes that follow the prefix.
const maxLabelField = 128

// ResourceOfKey names the resource an etcd key belongs to, as it is stored:
// kube-apiserver keeps its built-in resources, whatever their group, under
// RegistryPrefix<resource>/ (deployments of apps under /registry/deployments/),
// and custom and aggregated resources under RegistryPrefix<group>/<resource>/,
// whose group always has a dot. So a first segment with a dot is a group,
// and the resource is then named RESOURCE.GROUP. The segment is the one
// kube-apiserver chose, which for a few old resources is not their plural
// (nodes are under minions, ingresses under ingress, services and their
// endpoints share services). Keys of another shape are OtherResource.
func ResourceOfKey(key string) string {
	rest, ok := strings.CutPrefix(key, RegistryPrefix)
	if !ok {
		return OtherResource
	}
	first, rest, ok := strings.Cut(rest, "/")
	if !ok || first == "" || rest == "" {
		return OtherResource
	}
	if !strings.Contains(first, ".") {
		return first
	}
	resource, name, ok := strings.Cut(rest, "/")
	if !ok || resource == "" || name == "" {
		return OtherResource
	}
	return resource + "." + first
}

// ResourcePrefix is where the keys of resource are, named as ResourceOfKey
// names it: RegistryPrefix<resource>/ for RESOURCE, and
// RegistryPrefix<group>/<resource>/ for RESOURCE.GROUP. A group without a
// dot is refused: kube-apiserver stores those groups' resources under
// their resource alone, and the prefix would hold nothing, which would
// read as "nothing to worry about".
func ResourcePrefix(resource string) (string, error) {
	if resource == "" || strings.ContainsAny(resource, "/\x00") {
		return "", fmt.Errorf("resource %q: want RESOURCE or RESOURCE.GROUP, without slashes", resource)
	}
	name, group, dotted := strings.Cut(resource, ".")
	switch {
	case !dotted:
		return RegistryPrefix + name + "/", nil
	case name == "" || group == "" || strings.HasSuffix(group, "."):
		return "", fmt.Errorf("resource %q: want RESOURCE or RESOURCE.GROUP", resource)
	case !strings.Contains(group, "."):
		return "", fmt.Errorf("resource %q: kube-apiserver stores the built-in resources of every group under %s<resource>/; name it %q", resource, RegistryPrefix, name)
	}
	return RegistryPrefix + group + "/" + name + "/", nil
}

// Label classifies a raw value for a census: "<provider>:<version>:<key>"
// when it is encrypted (aescbc:v1:key1, kms:v2:vault), Identity when it is
// plain JSON or protobuf, Unrecognised otherwise. An encrypted label is
// always the start of the value after "k8s:enc:", and never reaches into
// the ciphertext. The encryption returned also holds a KMS v2 value's key
// ID, which is not part of the label; a KMS v2 value whose key ID cannot
// be read (see KMSv2KeyID) is Unrecognised, since it may be under any.
func Label(raw []byte) (string, Encryption) {
	v, err := Inspect(raw)
	switch {
	case err != nil:
		return Unrecognised, Encryption{}
	case v.Encryption == nil:
		return Identity, Encryption{}
	}
	e := *v.Encryption
	for _, f := range []string{e.Provider, e.Version, e.Key} {
		if !printableField(f) {
			return Unrecognised, Encryption{}
		}
	}
	return e.Provider + ":" + e.Version + ":" + e.Key, e
}

// printableField reports whether f is a plausible provider, version or key
// name: short, and printable ASCII without spaces.
func printableField(f string) bool {
	if f == "" || len(f) > maxLabelField {
		return false
	}
	for i := 0; i < len(f); i++ {
		if f[i] <= ' ' || f[i] > '~' {
			return false
		}
	}
	return true
}

// Tally is how many values of one resource are stored one way.
type Tally struct {
	Resource string
	// Label is what Label says of the values.
	Label string
	// Encryption is the provider, version and key of encrypted values,
	// with the key ID of KMS v2 values, and zero for Identity and
	// Unrecognised.
	Encryption Encryption
	Values     int64
}

// Census counts values by the resource their key belongs to, their
// Label and, for KMS v2, their key ID. It keeps counts only, so that what
// it is given, object names and Secrets' ciphertext among it, cannot end
// up in what is shown of it. The zero Census is empty and ready.
type Census struct {
	counts map[tallyClass]int64
	total  int64
}

type tallyClass struct {
	resource, label string
	encryption      Encryption
}

// Add counts the value raw stored under key.
func (c *Census) Add(key string, raw []byte) {
	if c.counts == nil {
		c.counts = map[tallyClass]int64{}
	}
	label, e := Label(raw)
	c.counts[tallyClass{resource: ResourceOfKey(key), label: label, encryption: e}]++
	c.total++
}

// Total is the number of values added.
func (c *Census) Total() int64 { return c.total }

// Tallies are the counts, by resource, then label, then key ID.
func (c *Census) Tallies() []Tally {
	out := make([]Tally, 0, len(c.counts))
	for k, n := range c.counts {
		out = append(out, Tally{Resource: k.resource, Label: k.label, Encryption: k.encryption, Values: n})
	}
	slices.SortFunc(out, func(a, b Tally) int {
		return cmp.Or(cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Label, b.Label), cmp.Compare(a.Encryption.KeyID, b.Encryption.KeyID))
	})
	return out
}
