package framework

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// encryptedObject is an EncryptedObject as kube-apiserver marshals it,
// with the key IDs given as field 2, in the order given, after the
// ciphertext.
func encryptedObject(keyIDs ...string) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("ciphertext:with:colons"))
	for _, id := range keyIDs {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, id)
	}
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("sealed seed"))
	b = protowire.AppendTag(b, 5, protowire.VarintType)
	return protowire.AppendVarint(b, 1)
}

func TestKMSv2KeyID(t *testing.T) {
	for _, tc := range []struct {
		name            string
		raw             []byte
		provider, keyID string
		ok, wantErr     bool
	}{
		{"kms v2", append([]byte("k8s:enc:kms:v2:vault:"), encryptedObject("key-1")...), "vault", "key-1", true, false},
		{"the last keyID counts, as in protobuf", append([]byte("k8s:enc:kms:v2:p:"), encryptedObject("a", "b")...), "p", "b", true, false},
		{"aescbc", []byte("k8s:enc:aescbc:v1:key1:xxxx"), "", "", false, false},
		{"unencrypted", []byte("k8s\x00\x0a\x02v1"), "", "", false, false},
		{"no keyID", append([]byte("k8s:enc:kms:v2:p:"), encryptedObject()...), "", "", true, true},
		{"not protobuf", []byte("k8s:enc:kms:v2:p:\xff"), "", "", true, true},
		{"no provider", []byte("k8s:enc:kms:v2::"), "", "", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			provider, keyID, ok, err := KMSv2KeyID(tc.raw)
			if provider != tc.provider || keyID != tc.keyID || ok != tc.ok || (err != nil) != tc.wantErr {
				t.Errorf("KMSv2KeyID = %q, %q, %v, %v; want %q, %q, %v, error %v", provider, keyID, ok, err, tc.provider, tc.keyID, tc.ok, tc.wantErr)
			}
		})
	}
}
