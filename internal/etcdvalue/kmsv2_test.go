package etcdvalue

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// encryptedObject holds the fields of kube-apiserver's KMS v2
// EncryptedObject (k8s.io/apiserver/pkg/storage/value/encrypt/envelope/kmsv2/v2).
type encryptedObject struct {
	encryptedData      []byte
	keyID              string
	encryptedDEKSource []byte
	annotations        map[string][]byte
	sourceType         uint64
}

// marshal encodes o as proto.Marshal encodes the generated type: fields
// in number order, empty ones left out, map entries as nested messages
// (sorted, as with MarshalOptions{Deterministic: true}).
func (o encryptedObject) marshal() []byte {
	var b []byte
	if len(o.encryptedData) > 0 {
		b = protowire.AppendBytes(protowire.AppendTag(b, 1, protowire.BytesType), o.encryptedData)
	}
	if o.keyID != "" {
		b = protowire.AppendString(protowire.AppendTag(b, 2, protowire.BytesType), o.keyID)
	}
	if len(o.encryptedDEKSource) > 0 {
		b = protowire.AppendBytes(protowire.AppendTag(b, 3, protowire.BytesType), o.encryptedDEKSource)
	}
	for _, k := range slices.Sorted(maps.Keys(o.annotations)) {
		var entry []byte
		entry = protowire.AppendString(protowire.AppendTag(entry, 1, protowire.BytesType), k)
		entry = protowire.AppendBytes(protowire.AppendTag(entry, 2, protowire.BytesType), o.annotations[k])
		b = protowire.AppendBytes(protowire.AppendTag(b, 4, protowire.BytesType), entry)
	}
	if o.sourceType != 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, 5, protowire.VarintType), o.sourceType)
	}
	return b
}

// kmsV2Value is a value as kube-apiserver writes it through the KMS v2
// provider named provider, sealed under keyID.
func kmsV2Value(provider, keyID string) []byte {
	o := encryptedObject{
		encryptedData:      []byte("\x8a\x01sealed:with:colons"),
		keyID:              keyID,
		encryptedDEKSource: []byte("dek-source"),
		annotations:        map[string][]byte{"kms.example.com/version": []byte("3")},
		sourceType:         1, // HKDF_SHA256_XNONCE_AES_GCM_SEED, what kube-apiserver writes since 1.29
	}
	return append([]byte("k8s:enc:kms:v2:"+provider+":"), o.marshal()...)
}

// generatedEncryptedObject is what proto.MarshalOptions{Deterministic:
// true}.Marshal made of the generated EncryptedObject of k8s.io/apiserver
// v0.37.1 with the fields of TestMarshalIsTheGeneratedType (printed by a
// scratch program outside svm's module, which does not require
// k8s.io/apiserver).
const generatedEncryptedObject = "\n\b\x8a\x01sealed\x124arn:aws:kms:eu-west-1:111122223333:key/1234abcd \"v2\"\x1a\ndek-source\"\x1c\n\x17kms.example.com/version\x12\x013(\x01"

// TestMarshalIsTheGeneratedType holds the tests' encoder to the bytes of
// kube-apiserver's own type, so that the values the tests build are the
// values kube-apiserver writes.
func TestMarshalIsTheGeneratedType(t *testing.T) {
	o := encryptedObject{
		encryptedData:      []byte("\x8a\x01sealed"),
		keyID:              `arn:aws:kms:eu-west-1:111122223333:key/1234abcd "v2"`,
		encryptedDEKSource: []byte("dek-source"),
		annotations:        map[string][]byte{"kms.example.com/version": []byte("3")},
		sourceType:         1,
	}
	if got := o.marshal(); string(got) != generatedEncryptedObject {
		t.Errorf("marshal() = %q\nwant        %q", got, generatedEncryptedObject)
	}
	if id, err := KMSv2KeyID([]byte(generatedEncryptedObject)); err != nil || id != o.keyID {
		t.Errorf("KMSv2KeyID(generated) = %q, %v; want %q", id, err, o.keyID)
	}
}

func TestKMSv2KeyID(t *testing.T) {
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(tag(num, protowire.BytesType), s)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name    string
		obj     []byte
		want    string
		wantErr string
	}{
		{name: "as kube-apiserver writes it", obj: encryptedObject{encryptedData: []byte{1}, keyID: "key-2025", encryptedDEKSource: []byte{2}}.marshal(), want: "key-2025"},
		{name: "any character", obj: encryptedObject{keyID: "a:b \"c\"\n\t\u202e ключ"}.marshal(), want: "a:b \"c\"\n\t\u202e ключ"},
		{name: "the longest kube-apiserver reads", obj: str(2, strings.Repeat("k", KMSv2KeyIDMaxSize)), want: strings.Repeat("k", KMSv2KeyIDMaxSize)},
		{name: "the last keyID counts, as in protobuf", obj: cat(str(2, "old"), str(1, "data"), str(2, "new")), want: "new"},
		{name: "unknown fields are skipped", obj: cat(str(9, "x"), protowire.AppendFixed64(tag(10, protowire.Fixed64Type), 1), str(2, "k")), want: "k"},

		{name: "empty", obj: nil, wantErr: "EncryptedObject has no keyID"},
		{name: "no keyID", obj: encryptedObject{encryptedData: []byte{1}, encryptedDEKSource: []byte{2}}.marshal(), wantErr: "EncryptedObject has no keyID"},
		{name: "empty keyID", obj: str(2, ""), wantErr: "EncryptedObject has no keyID"},
		{name: "keyID of another wire type is no keyID", obj: protowire.AppendVarint(tag(2, protowire.VarintType), 5), wantErr: "EncryptedObject has no keyID"},
		{name: "too long", obj: str(2, strings.Repeat("k", KMSv2KeyIDMaxSize+1)), wantErr: "EncryptedObject's keyID is 1025 bytes, more than the 1024 kube-apiserver reads"},
		{name: "not UTF-8", obj: str(2, "\xff"), wantErr: "EncryptedObject's keyID is not UTF-8"},
		{name: "truncated keyID", obj: str(2, "key-2025")[:5], wantErr: "decode EncryptedObject field 2: unexpected EOF"},
		{name: "truncated tag", obj: []byte{0x92}, wantErr: "decode EncryptedObject: unexpected EOF"},
		// protobuf's own messages randomly put a non-breaking space after
		// "proto:", so that nobody matches them whole.
		{name: "field number 0", obj: []byte{0x02, 0x00}, wantErr: "decode EncryptedObject: proto:"},
		{name: "length past the end", obj: []byte{0x12, 0x7f, 'k'}, wantErr: "decode EncryptedObject field 2: unexpected EOF"},
		{name: "ciphertext of another provider", obj: []byte("\x8f\x00\x01\x02ciphertext"), wantErr: "decode EncryptedObject"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := KMSv2KeyID(tt.obj)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) || got != "" {
					t.Fatalf("KMSv2KeyID() = %q, %v; want error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("KMSv2KeyID() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestQuoteKeyID(t *testing.T) {
	for _, tt := range []struct{ keyID, want string }{
		{"key-2025", "key-2025"},
		{"arn:aws:kms:eu-west-1:111122223333:key/1234abcd", "arn:aws:kms:eu-west-1:111122223333:key/1234abcd"},
		{"https://vault.example.com/keys/k/3", "https://vault.example.com/keys/k/3"},
		{"key 2", `"key 2"`},
		{`"quoted"`, `"\"quoted\""`},
		{`back\slash`, `"back\\slash"`},
		{"line\nbreak\ttab", `"line\nbreak\ttab"`},
		{"ключ", `"ключ"`},
		{"\u202eevil", `"\u202eevil"`},
		{"", `""`},
	} {
		got := QuoteKeyID(tt.keyID)
		if got != tt.want {
			t.Errorf("QuoteKeyID(%q) = %s, want %s", tt.keyID, got, tt.want)
		}
		if back, err := UnquoteKeyID(got); err != nil || back != tt.keyID {
			t.Errorf("UnquoteKeyID(%s) = %q, %v; want %q", got, back, err, tt.keyID)
		}
	}
	if _, err := UnquoteKeyID(`"open`); err == nil {
		t.Errorf(`UnquoteKeyID("open) succeeded`)
	}
}
