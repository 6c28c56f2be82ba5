package etcdvalue

import (
	"bytes"
	"encoding/json"
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
