package etcdscan

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/svm-project/svm/internal/etcdvalue"
)

// FailOnKey is the key one --fail-on-key names. Written NAME (no colon),
// it is a key of that name in the encryption configuration whatever its
// provider, a KMS provider of that name whatever its key IDs, or a KMS v2
// key ID: a check is a gate, and fails on whichever the operator meant.
// Written kms:v2:PROVIDER:KEYID, as the table shows it, it is the one key
// ID of one KMS v2 provider, which may hold colons (an ARN, a URL) and,
// quoted as the table quotes it, any character; kms:v2:PROVIDER alone is
// every key ID of that provider.
type FailOnKey struct {
	// Name is the key's name, or the KMS v2 provider's with KMSv2.
	Name string
	// KMSv2 is set for kms:v2:PROVIDER[:KEYID].
	KMSv2 bool
	// KeyID is KEYID, unquoted; empty for every key ID of the provider.
	KeyID string
}

// kmsV2Label starts the label of every KMS v2 value.
const kmsV2Label = "kms:v2:"

// ParseFailOnKey reads a --fail-on-key argument. It refuses what could
// never match, so that a mistyped key is an error rather than a check
// that passes: any other label (aescbc:v1:key1), and a key ID that
// kube-apiserver would not write.
func ParseFailOnKey(arg string) (FailOnKey, error) {
	rest, kms := strings.CutPrefix(arg, kmsV2Label)
	if !kms {
		if arg == "" || strings.Contains(arg, ":") {
			return FailOnKey{}, fmt.Errorf("--fail-on-key %q: want the name of a key in the encryption configuration (for KMS, the provider's name), a KMS v2 key ID without colons, or kms:v2:PROVIDER:KEYID", arg)
		}
		return FailOnKey{Name: arg}, nil
	}
	provider, shown, withKeyID := strings.Cut(rest, ":")
	if provider == "" {
		return FailOnKey{}, fmt.Errorf("--fail-on-key %q: want kms:v2:PROVIDER:KEYID, or kms:v2:PROVIDER for every key ID of the provider", arg)
	}
	k := FailOnKey{Name: provider, KMSv2: true}
	if !withKeyID {
		return k, nil
	}
	keyID, err := etcdvalue.UnquoteKeyID(shown)
	switch {
	case err != nil:
		return FailOnKey{}, fmt.Errorf("--fail-on-key %q: %w", arg, err)
	case keyID == "":
		return FailOnKey{}, fmt.Errorf("--fail-on-key %q: the key ID is empty, and kube-apiserver writes none; kms:v2:%s alone names every key ID", arg, provider)
	case len(keyID) > etcdvalue.KMSv2KeyIDMaxSize || !utf8.ValidString(keyID):
		return FailOnKey{}, fmt.Errorf("--fail-on-key %q: kube-apiserver writes no such key ID (UTF-8, at most %d bytes)", arg, etcdvalue.KMSv2KeyIDMaxSize)
	}
	k.KeyID = keyID
	return k, nil
}

// String is k as svm shows it, key ID quoted where needed.
func (k FailOnKey) String() string {
	switch {
	case !k.KMSv2:
		return k.Name
	case k.KeyID == "":
		return kmsV2Label + k.Name
	}
	return kmsV2Label + k.Name + ":" + etcdvalue.QuoteKeyID(k.KeyID)
}

// Matches reports whether the values c counts are under k.
func (k FailOnKey) Matches(c Count) bool {
	if !k.KMSv2 {
		return c.Key == k.Name || (c.KeyID != "" && c.KeyID == k.Name)
	}
	return c.Encryption == kmsV2Label+k.Name && (k.KeyID == "" || c.KeyID == k.KeyID)
}

// under says what values under k are encrypted under, for the check's
// message.
func (k FailOnKey) under() string {
	switch {
	case !k.KMSv2:
		return "under key " + k.Name
	case k.KeyID == "":
		return "by KMS v2 provider " + k.Name
	}
	return "under key ID " + etcdvalue.QuoteKeyID(k.KeyID) + " of KMS v2 provider " + k.Name
}
