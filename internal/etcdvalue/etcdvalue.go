// Package etcdvalue explains a raw value that kube-apiserver stored in etcd:
// whether it is encrypted and under which provider and key (for KMS v2,
// also the key ID its EncryptedObject keeps in the clear), and, when it is
// not, which apiVersion and kind it is encoded in. A Census counts many
// such values by the resource their key belongs to and how they are
// stored, keeping neither keys nor values.
//
// It exists so that svm's claims are checked where they matter, in the bytes
// the API server really stored, rather than in what the API server serves
// (which is always converted to the requested version).
package etcdvalue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// Encryption names the encryption-at-rest provider and key that wrapped a value.
type Encryption struct {
	// Provider is the provider type, such as aescbc, aesgcm, secretbox or
	// kms.
	Provider string
	// Version is the version of the provider's envelope: v1, or v2 for
	// KMS v2, whose values the deprecated KMS v1 cannot read.
	Version string
	// Key is the name of the key in the encryption configuration; for KMS,
	// the name of the KMS provider.
	Key string
	// KeyID is, for KMS v2 only, the key ID the KMS plugin reported when
	// the value was written, read from the value's EncryptedObject, where
	// it is not encrypted. It may hold any character; QuoteKeyID prints it.
	KeyID string
}

// Value is what a raw etcd value says about itself.
type Value struct {
	// Encryption is set when the value is encrypted; APIVersion and Kind are
	// then unknown, since the payload cannot be read without the key.
	Encryption *Encryption
	// APIVersion and Kind of the stored object, for unencrypted values.
	APIVersion string
	Kind       string
	// Encoding is "json" or "protobuf" for unencrypted values.
	Encoding string
}

var (
	encryptedPrefix = []byte("k8s:enc:")
	protobufPrefix  = []byte{'k', '8', 's', 0}
)

// Inspect reads the envelope of a raw etcd value.
func Inspect(raw []byte) (Value, error) {
	switch {
	case bytes.HasPrefix(raw, encryptedPrefix):
		return inspectEncrypted(raw)
	case bytes.HasPrefix(raw, protobufPrefix):
		var u runtime.Unknown
		if err := u.Unmarshal(raw[len(protobufPrefix):]); err != nil {
			return Value{}, fmt.Errorf("decode protobuf envelope: %w", err)
		}
		return Value{APIVersion: u.APIVersion, Kind: u.Kind, Encoding: "protobuf"}, nil
	case bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")):
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := json.Unmarshal(raw, &tm); err != nil {
			return Value{}, fmt.Errorf("decode json: %w", err)
		}
		return Value{APIVersion: tm.APIVersion, Kind: tm.Kind, Encoding: "json"}, nil
	default:
		return Value{}, errors.New("unrecognised value: neither encrypted, protobuf nor json")
	}
}

// inspectEncrypted parses "k8s:enc:<provider>:<version>:<key>:<ciphertext>",
// as in "k8s:enc:aescbc:v1:key1:..." and "k8s:enc:kms:v2:vault:...", and,
// for KMS v2, reads the key ID from the EncryptedObject after the prefix
// (KMS v2 provider names have no colon, so the prefix ends at the third).
func inspectEncrypted(raw []byte) (Value, error) {
	fields := bytes.SplitN(raw[len(encryptedPrefix):], []byte(":"), 4)
	if len(fields) < 4 || len(fields[0]) == 0 || len(fields[2]) == 0 {
		return Value{}, errors.New("malformed encrypted value prefix")
	}
	e := &Encryption{Provider: string(fields[0]), Version: string(fields[1]), Key: string(fields[2])}
	if isKMSv2(e.Provider, e.Version) {
		keyID, err := KMSv2KeyID(fields[3])
		if err != nil {
			return Value{}, fmt.Errorf("KMS v2 value of provider %q: %w", e.Key, err)
		}
		e.KeyID = keyID
	}
	return Value{Encryption: e}, nil
}
