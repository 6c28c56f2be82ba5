package etcdvalue

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResourceOfKey(t *testing.T) {
	tests := []struct {
		key, want string
	}{
		{"/registry/secrets/team-a/db-password", "secrets"},
		{"/registry/namespaces/team-a", "namespaces"},
		// Built-in resources of other groups are stored without their group.
		{"/registry/deployments/default/web", "deployments"},
		{"/registry/services/specs/default/kubernetes", "services"},
		{"/registry/minions/node-1", "minions"},
		{"/registry/example.com/widgets/default/w-1", "widgets.example.com"},
		{"/registry/example.com/widgets/cluster-scoped", "widgets.example.com"},
		{"/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com", "customresourcedefinitions.apiextensions.k8s.io"},
		// A name with dots does not make a group.
		{"/registry/persistentvolumes/pv.with.dots", "persistentvolumes"},
		{"/registry/secrets", OtherResource},
		{"/registry/secrets/", OtherResource},
		{"/registry/", OtherResource},
		{"/registry//x", OtherResource},
		{"/registry/example.com/widgets", OtherResource},
		{"/registry/example.com/widgets/", OtherResource},
		{"/registry/example.com//w-1", OtherResource},
		{"/elsewhere/secrets/a/b", OtherResource},
		{"compact_rev_key", OtherResource},
	}
	for _, tt := range tests {
		if got := ResourceOfKey(tt.key); got != tt.want {
			t.Errorf("ResourceOfKey(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestResourcePrefix(t *testing.T) {
	tests := []struct {
		resource, want, wantErr string
	}{
		{resource: "secrets", want: "/registry/secrets/"},
		{resource: "widgets.example.com", want: "/registry/example.com/widgets/"},
		{resource: "apiservices.apiregistration.k8s.io", want: "/registry/apiregistration.k8s.io/apiservices/"},
		{resource: "deployments.apps", wantErr: `resource "deployments.apps": kube-apiserver stores the built-in resources of every group under /registry/<resource>/; name it "deployments"`},
		{resource: "", wantErr: `resource "": want RESOURCE or RESOURCE.GROUP, without slashes`},
		{resource: "secrets/team-a", wantErr: `resource "secrets/team-a": want RESOURCE or RESOURCE.GROUP, without slashes`},
		{resource: ".example.com", wantErr: `resource ".example.com": want RESOURCE or RESOURCE.GROUP`},
		{resource: "widgets.", wantErr: `resource "widgets.": want RESOURCE or RESOURCE.GROUP`},
		{resource: "widgets.example.", wantErr: `resource "widgets.example.": want RESOURCE or RESOURCE.GROUP`},
	}
	for _, tt := range tests {
		got, err := ResourcePrefix(tt.resource)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ResourcePrefix(%q) error = %v, want %q", tt.resource, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ResourcePrefix(%q) = %q, %v; want %q", tt.resource, got, err, tt.want)
		}
		// What the prefix holds, ResourceOfKey puts back under resource.
		if back := ResourceOfKey(got + "ns/name"); back != tt.resource {
			t.Errorf("ResourceOfKey(ResourcePrefix(%q)+name) = %q", tt.resource, back)
		}
	}
}

func TestLabel(t *testing.T) {
	tests := []struct {
		name  string
		raw   []byte
		want  string
		keyID string
	}{
		{"aescbc", []byte("k8s:enc:aescbc:v1:key1:\x8f\x00ciphertext:with:colons"), "aescbc:v1:key1", ""},
		// The key ID is not part of the label, whatever it holds.
		{"kms v2", kmsV2Value("vault", "key-2025"), "kms:v2:vault", "key-2025"},
		{"kms v2, a key ID with colons and spaces", kmsV2Value("vault", "arn:aws:kms:x:1:key/a b"), "kms:v2:vault", "arn:aws:kms:x:1:key/a b"},
		{"kms v2 whose key ID cannot be read", []byte("k8s:enc:kms:v2:vault:\x0a\x05dek..."), Unrecognised, ""},
		{"kms v2 without a key ID", []byte("k8s:enc:kms:v2:vault:\x0a\x01d"), Unrecognised, ""},
		{"protobuf", protobufValue(t, "v1", "ConfigMap"), Identity, ""},
		{"json", []byte(`{"apiVersion":"v1","kind":"ConfigMap"}`), Identity, ""},
		{"json without a kind is still plain text", []byte(`{}`), Identity, ""},
		{"malformed encrypted prefix", []byte("k8s:enc:aescbc"), Unrecognised, ""},
		{"empty version", []byte("k8s:enc:aescbc::key1:x"), Unrecognised, ""},
		// A corrupted prefix must not put ciphertext into the label.
		{"binary key name", []byte("k8s:enc:aescbc:v1:\x8f\x01\x02:x"), Unrecognised, ""},
		{"key name with a space", []byte("k8s:enc:aescbc:v1:a b:x"), Unrecognised, ""},
		{"overlong key name", []byte("k8s:enc:aescbc:v1:" + strings.Repeat("k", maxLabelField+1) + ":x"), Unrecognised, ""},
		{"garbage", []byte("\x00\x01"), Unrecognised, ""},
		{"empty", nil, Unrecognised, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, e := Label(tt.raw)
			if got != tt.want {
				t.Errorf("Label() = %q, want %q", got, tt.want)
			}
			// The encryption is the one the label names, none for the others.
			want := named(tt.want)
			want.KeyID = tt.keyID
			if diff := cmp.Diff(want, e); diff != "" {
				t.Errorf("Label() encryption (-want +got):\n%s", diff)
			}
		})
	}
}

// named is the encryption an encrypted value's label names, and none for
// Identity and Unrecognised.
func named(label string) Encryption {
	f := strings.SplitN(label, ":", 3)
	if len(f) != 3 {
		return Encryption{}
	}
	return Encryption{Provider: f[0], Version: f[1], Key: f[2]}
}

func TestCensus(t *testing.T) {
	type kv struct {
		key string
		raw string
	}
	const (
		key1 = "k8s:enc:aescbc:v1:key1:\x01\x02"
		key2 = "k8s:enc:aescbc:v1:key2:\x03\x04"
		js   = `{"apiVersion":"v1","kind":"ConfigMap"}`
	)
	var (
		kmsOld = string(kmsV2Value("vault", "key-2024"))
		kmsNew = string(kmsV2Value("vault", "key-2025"))
		kmsGCP = string(kmsV2Value("gcp", "key-2025"))
	)
	kms := func(provider, keyID string) Encryption {
		return Encryption{Provider: "kms", Version: "v2", Key: provider, KeyID: keyID}
	}
	tests := []struct {
		name      string
		values    []kv
		want      []Tally
		wantTotal int64
	}{
		{name: "empty", want: []Tally{}},
		{
			name: "a key rotation half done, with plain configmaps and a custom resource",
			values: []kv{
				{"/registry/secrets/a/s1", key1},
				{"/registry/secrets/a/s2", key2},
				{"/registry/secrets/b/s3", key1},
				{"/registry/configmaps/a/c1", js},
				{"/registry/example.com/widgets/a/w1", key2},
				{"/registry/secrets/b/s4", "garbage"},
				{"/registry/secrets", js},
			},
			want: []Tally{
				{Resource: OtherResource, Label: Identity, Values: 1},
				{Resource: "configmaps", Label: Identity, Values: 1},
				{Resource: "secrets", Label: "aescbc:v1:key1", Encryption: Encryption{Provider: "aescbc", Version: "v1", Key: "key1"}, Values: 2},
				{Resource: "secrets", Label: "aescbc:v1:key2", Encryption: Encryption{Provider: "aescbc", Version: "v1", Key: "key2"}, Values: 1},
				{Resource: "secrets", Label: Unrecognised, Values: 1},
				{Resource: "widgets.example.com", Label: "aescbc:v1:key2", Encryption: Encryption{Provider: "aescbc", Version: "v1", Key: "key2"}, Values: 1},
			},
			wantTotal: 7,
		},
		{
			name: "a KMS v2 key rotation half done: two key IDs of one provider counted apart",
			values: []kv{
				{"/registry/secrets/a/s1", kmsOld},
				{"/registry/secrets/a/s2", kmsNew},
				{"/registry/secrets/a/s3", kmsNew},
				{"/registry/secrets/b/s4", kmsGCP},
				{"/registry/secrets/b/s5", "k8s:enc:kms:v2:vault:\x0a"},
				{"/registry/configmaps/a/c1", kmsOld},
			},
			want: []Tally{
				{Resource: "configmaps", Label: "kms:v2:vault", Encryption: kms("vault", "key-2024"), Values: 1},
				{Resource: "secrets", Label: "kms:v2:gcp", Encryption: kms("gcp", "key-2025"), Values: 1},
				{Resource: "secrets", Label: "kms:v2:vault", Encryption: kms("vault", "key-2024"), Values: 1},
				{Resource: "secrets", Label: "kms:v2:vault", Encryption: kms("vault", "key-2025"), Values: 2},
				{Resource: "secrets", Label: Unrecognised, Values: 1},
			},
			wantTotal: 6,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Census
			for _, v := range tt.values {
				c.Add(v.key, []byte(v.raw))
			}
			if diff := cmp.Diff(tt.want, c.Tallies()); diff != "" {
				t.Errorf("Tallies() (-want +got):\n%s", diff)
			}
			if c.Total() != tt.wantTotal {
				t.Errorf("Total() = %d, want %d", c.Total(), tt.wantTotal)
			}
		})
	}
}

// FuzzLabel holds Label to its promise: what it shows of an encrypted
// value is the value's own prefix, never anything of the ciphertext after
// it, and nothing else is shown at all.
func FuzzLabel(f *testing.F) {
	f.Add([]byte("k8s:enc:aescbc:v1:key1:\x00\x01ciphertext"))
	f.Add([]byte("k8s:enc:kms:v2:vault:"))
	f.Add(kmsV2Value("vault", "key-2025"))
	f.Add(kmsV2Value("vault", "a:b \"c\"\n"))
	f.Add([]byte("k8s:enc:a:b:c"))
	f.Add([]byte(`{"kind":"Secret"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		label, e := Label(raw)
		switch label {
		case Identity, Unrecognised:
			if e != (Encryption{}) {
				t.Errorf("Label(%q) = %q with encryption %+v", raw, label, e)
			}
		default:
			if !bytes.HasPrefix(raw, []byte("k8s:enc:"+label+":")) {
				t.Errorf("Label(%q) = %q: not the value's prefix", raw, label)
			}
			if strings.Count(label, ":") != 2 || label != e.Provider+":"+e.Version+":"+e.Key {
				t.Errorf("Label(%q) = %q, encryption %+v", raw, label, e)
			}
			// A key ID is read from the value, where it is in the clear,
			// and only from a KMS v2 value.
			if (e.KeyID != "") != (label == "kms:v2:"+e.Key) || !bytes.Contains(raw, []byte(e.KeyID)) {
				t.Errorf("Label(%q) = %q, key ID %q", raw, label, e.KeyID)
			}
		}
	})
}
