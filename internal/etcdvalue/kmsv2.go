package etcdvalue

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// KMS v2 values are "k8s:enc:kms:v2:<provider>:" followed by kube-apiserver's
// EncryptedObject in protobuf, whose keyID is not encrypted
// (k8s.io/apiserver/pkg/storage/value/encrypt/envelope/kmsv2/v2, api.proto):
//
//	message EncryptedObject {
//	  bytes encryptedData = 1;
//	  string keyID = 2;
//	  bytes encryptedDEKSource = 3;
//	  map<string, bytes> annotations = 4;
//	  EncryptedDEKSourceType encryptedDEKSourceType = 5;
//	}
//
// The message is read here with protowire rather than with its generated
// type, which would add k8s.io/apiserver to svm's module for one field.
const (
	kmsV2KeyIDField protowire.Number = 2
	// KMSv2KeyIDMaxSize is the longest key ID kube-apiserver writes or reads
	// (its kmsv2.KeyIDMaxSize).
	KMSv2KeyIDMaxSize = 1024
)

// isKMSv2 reports whether e is a KMS v2 envelope, the only one with a key ID.
func isKMSv2(provider, version string) bool { return provider == "kms" && version == "v2" }

// KMSv2KeyID reads the key ID of a KMS v2 value from its EncryptedObject,
// the bytes after "k8s:enc:kms:v2:<provider>:". It refuses what
// kube-apiserver itself would not read: a message that is not well-formed
// protobuf, and a key ID that is missing, empty, longer than
// KMSv2KeyIDMaxSize or not UTF-8 (keyID is a proto3 string). As in
// protobuf, the last keyID in the message counts, and a keyID of another
// wire type is an unknown field, not a key ID.
func KMSv2KeyID(encryptedObject []byte) (string, error) {
	var keyID []byte
	found := false
	for b := encryptedObject; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", fmt.Errorf("decode EncryptedObject: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == kmsV2KeyIDField && typ == protowire.BytesType {
			keyID, n = protowire.ConsumeBytes(b)
			found = true
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return "", fmt.Errorf("decode EncryptedObject field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	switch {
	case !found || len(keyID) == 0:
		return "", errors.New("EncryptedObject has no keyID")
	case len(keyID) > KMSv2KeyIDMaxSize:
		return "", fmt.Errorf("EncryptedObject's keyID is %d bytes, more than the %d kube-apiserver reads", len(keyID), KMSv2KeyIDMaxSize)
	case !utf8.Valid(keyID):
		return "", errors.New("EncryptedObject's keyID is not UTF-8")
	}
	return string(keyID), nil
}

// QuoteKeyID is a KMS v2 key ID as svm prints it: as it is when it is
// printable ASCII without spaces, quotes or backslashes, and otherwise
// quoted as a Go string ("key 2", "\n"), since a key ID may hold any
// character. UnquoteKeyID reads either form back.
func QuoteKeyID(keyID string) string {
	for i := 0; i < len(keyID); i++ {
		if c := keyID[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return strconv.Quote(keyID)
		}
	}
	if keyID == "" {
		return `""`
	}
	return keyID
}

// UnquoteKeyID is the key ID that QuoteKeyID printed as shown: a shown
// form that starts with a double quote is unquoted, anything else is the
// key ID itself.
func UnquoteKeyID(shown string) (string, error) {
	if len(shown) == 0 || shown[0] != '"' {
		return shown, nil
	}
	keyID, err := strconv.Unquote(shown)
	if err != nil {
		return "", fmt.Errorf("%s is not a key ID quoted as svm prints it: %w", shown, err)
	}
	return keyID, nil
}
