package etcdvalue

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzInspect feeds Inspect arbitrary bytes, as a corrupted or unexpected
// etcd value would: it must never panic, and what it claims must follow
// from the bytes.
func FuzzInspect(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"example.com/v2","kind":"Widget"}`))
	f.Add([]byte("k8s:enc:aescbc:v1:key1:\x00\x01ciphertext"))
	f.Add([]byte("k8s:enc:::"))
	f.Add(kmsV2Value("vault", "key-2025"))
	f.Add(kmsV2Value("vault", "arn:aws:kms:x:1:key/a \"b\"\n"))
	f.Add([]byte("k8s:enc:kms:v2:vault:"))
	f.Add([]byte("k8s:enc:kms:v2:vault:\x12\x7fk"))                // keyID longer than the value
	f.Add([]byte("k8s:enc:kms:v2:vault:\x12\x01\xff"))             // keyID not UTF-8
	f.Add([]byte("k8s:enc:kms:v2:vault:\x10\x05"))                 // keyID of another wire type
	f.Add([]byte("k8s:enc:kms:v2:vault:\x0b\x12\x01k\x0c"))        // a group around a keyID
	f.Add([]byte("k8s:enc:kms:v2:vault:\x92\x80\x80\x80\x80\x80")) // a tag that never ends
	f.Add(append([]byte{'k', '8', 's', 0}, 0x0a, 0x02, 'v', '1'))
	f.Add([]byte(" \n{"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := Inspect(raw)
		if err != nil {
			if v != (Value{}) {
				t.Errorf("Inspect(%q) failed (%v) but returned %+v", raw, err, v)
			}
			return
		}
		switch {
		case v.Encryption != nil:
			if !bytes.HasPrefix(raw, encryptedPrefix) || v.Encryption.Provider == "" || v.Encryption.Key == "" {
				t.Errorf("Inspect(%q) = encrypted %+v", raw, *v.Encryption)
			}
			if v.APIVersion != "" || v.Kind != "" || v.Encoding != "" {
				t.Errorf("Inspect(%q) claims to read an encrypted payload: %+v", raw, v)
			}
			// Only KMS v2 values have a key ID, always one kube-apiserver
			// could have written, and always read from the value's bytes.
			e := v.Encryption
			if kms := isKMSv2(e.Provider, e.Version); kms != (e.KeyID != "") ||
				len(e.KeyID) > KMSv2KeyIDMaxSize || !utf8.ValidString(e.KeyID) || !bytes.Contains(raw, []byte(e.KeyID)) {
				t.Errorf("Inspect(%q) = encrypted %+v", raw, *e)
			}
		case v.Encoding == "protobuf":
			if !bytes.HasPrefix(raw, protobufPrefix) {
				t.Errorf("Inspect(%q) = protobuf without the protobuf magic", raw)
			}
		case v.Encoding == "json":
			if !json.Valid(raw) {
				t.Errorf("Inspect(%q) = json for invalid JSON", raw)
			}
		default:
			t.Errorf("Inspect(%q) = %+v: neither encrypted, protobuf nor json", raw, v)
		}
	})
}

// FuzzInspectRoundTrip encodes an arbitrary apiVersion and kind the way the
// API server does, in JSON and in protobuf's envelope, and expects Inspect
// to read back exactly what was written.
func FuzzInspectRoundTrip(f *testing.F) {
	f.Add("example.com/v1", "Widget")
	f.Add("v1", "Secret")
	f.Add("", "")
	f.Add("a:b", "k8s:enc:")
	f.Fuzz(func(t *testing.T, apiVersion, kind string) {
		if !utf8.ValidString(apiVersion) || !utf8.ValidString(kind) {
			return // JSON would replace invalid bytes; the API server never writes them
		}
		js, err := json.Marshal(map[string]string{"apiVersion": apiVersion, "kind": kind})
		if err != nil {
			t.Fatal(err)
		}
		if v, err := Inspect(js); err != nil || v != (Value{APIVersion: apiVersion, Kind: kind, Encoding: "json"}) {
			t.Errorf("json %s: got %+v, %v", js, v, err)
		}
		if v, err := Inspect(protobufValue(t, apiVersion, kind)); err != nil || v != (Value{APIVersion: apiVersion, Kind: kind, Encoding: "protobuf"}) {
			t.Errorf("protobuf %q/%q: got %+v, %v", apiVersion, kind, v, err)
		}
	})
}

// FuzzKMSv2RoundTrip seals values under arbitrary key IDs the way
// kube-apiserver does and expects Inspect to read each key ID back
// exactly, and the quoting svm prints it with to read back too.
func FuzzKMSv2RoundTrip(f *testing.F) {
	f.Add("key-2025")
	f.Add("arn:aws:kms:eu-west-1:111122223333:key/1234abcd")
	f.Add("a \"b\"\n\\")
	f.Add(strings.Repeat("k", KMSv2KeyIDMaxSize))
	f.Fuzz(func(t *testing.T, keyID string) {
		if keyID == "" || len(keyID) > KMSv2KeyIDMaxSize || !utf8.ValidString(keyID) {
			return // kube-apiserver writes no such key ID
		}
		v, err := Inspect(kmsV2Value("vault", keyID))
		if want := (Encryption{Provider: "kms", Version: "v2", Key: "vault", KeyID: keyID}); err != nil || v.Encryption == nil || *v.Encryption != want {
			t.Fatalf("Inspect(value under %q) = %+v, %v", keyID, v, err)
		}
		shown := QuoteKeyID(keyID)
		if back, err := UnquoteKeyID(shown); err != nil || back != keyID {
			t.Errorf("UnquoteKeyID(QuoteKeyID(%q) = %s) = %q, %v", keyID, shown, back, err)
		}
		if strings.IndexFunc(shown, func(r rune) bool { return r != ' ' && !strconv.IsGraphic(r) }) >= 0 {
			t.Errorf("QuoteKeyID(%q) = %s: what is not a visible character would break a table", keyID, shown)
		}
	})
}
