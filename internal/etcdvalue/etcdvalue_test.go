package etcdvalue

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
)

// protobufValue is an object of apiVersion and kind as kube-apiserver
// stores it in protobuf.
func protobufValue(t testing.TB, apiVersion, kind string) []byte {
	t.Helper()
	pb, err := (&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}, Raw: []byte{1, 2}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{'k', '8', 's', 0}, pb...)
}

func TestInspect(t *testing.T) {
	tests := []struct {
		name    string
		raw     []byte
		want    Value
		wantErr bool
	}{
		{name: "json custom resource", raw: []byte(`{"apiVersion":"example.com/v2","kind":"Widget","spec":{}}`),
			want: Value{APIVersion: "example.com/v2", Kind: "Widget", Encoding: "json"}},
		{name: "protobuf built-in", raw: protobufValue(t, "v1", "ConfigMap"),
			want: Value{APIVersion: "v1", Kind: "ConfigMap", Encoding: "protobuf"}},
		{name: "encrypted", raw: []byte("k8s:enc:aescbc:v1:key2:\x00\x01binary:with:colons"),
			want: Value{Encryption: &Encryption{Provider: "aescbc", Version: "v1", Key: "key2"}}},
		{name: "kms v2, named after its provider, with its key ID", raw: kmsV2Value("vault", "transit-key:3"),
			want: Value{Encryption: &Encryption{Provider: "kms", Version: "v2", Key: "vault", KeyID: "transit-key:3"}}},
		{name: "kms v1 has no key ID", raw: []byte("k8s:enc:kms:v1:vault:\x00\x03dekciphertext"),
			want: Value{Encryption: &Encryption{Provider: "kms", Version: "v1", Key: "vault"}}},
		{name: "kms v2 without an EncryptedObject", raw: []byte("k8s:enc:kms:v2:vault:"), wantErr: true},
		{name: "kms v2 with a broken EncryptedObject", raw: []byte("k8s:enc:kms:v2:vault:\x0a\x05dek"), wantErr: true},
		{name: "malformed encrypted", raw: []byte("k8s:enc:aescbc"), wantErr: true},
		{name: "garbage", raw: []byte("\x00\x01"), wantErr: true},
		{name: "broken json", raw: []byte(`{"apiVersion":`), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Inspect(tt.raw)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Inspect() error = %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Inspect() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
