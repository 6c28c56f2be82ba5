package rotation

import (
	"fmt"
	"slices"
	"strings"
	"time"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/apiservers"
)

// KMSKeysAnnotation records, on a re-encryption migration, the KMS v2 key
// of each provider every API server wrote under when it was created, as
// FormatKMSKeys writes them; absent when the configuration has no KMS v2
// provider.
const KMSKeysAnnotation = "migration.k8s.io/encryption-kms-keys"

// FormatKMSKeys writes keys as "provider=keyIDHash" by provider, comma
// separated: the value of KMSKeysAnnotation.
func FormatKMSKeys(keys []migrationv1alpha1.KMSKey) string {
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k.Provider+"="+k.KeyIDHash)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// parseKMSKeys reads what FormatKMSKeys wrote; a part it cannot read is
// a provider with no key.
func parseKMSKeys(s string) []migrationv1alpha1.KMSKey {
	var out []migrationv1alpha1.KMSKey
	for part := range strings.SplitSeq(s, ",") {
		if part == "" {
			continue
		}
		provider, hash, _ := strings.Cut(part, "=")
		out = append(out, migrationv1alpha1.KMSKey{Provider: provider, KeyIDHash: hash})
	}
	return out
}

// target is what a re-encryption is made for, as mark.Target reads it
// back from its annotations: the configuration, then the KMS v2 keys.
func target(config string, keys []migrationv1alpha1.KMSKey) string {
	if len(keys) == 0 {
		return config
	}
	return config + " " + FormatKMSKeys(keys)
}

// splitTarget is the configuration and KMS v2 keys of a target.
func splitTarget(t string) (string, []migrationv1alpha1.KMSKey) {
	config, keys, _ := strings.Cut(t, " ")
	return config, parseKMSKeys(keys)
}

// Describe names a configuration and its KMS v2 keys in messages.
func Describe(config string, keys []migrationv1alpha1.KMSKey) string {
	return describe(config, keys)
}

// describe names a target in messages.
func describe(config string, keys []migrationv1alpha1.KMSKey) string {
	if len(keys) == 0 {
		return "configuration " + config
	}
	return "configuration " + config + " with KMS v2 keys " + FormatKMSKeys(keys)
}

// sameKeys reports whether a and b name the same key for every provider.
func sameKeys(a, b []migrationv1alpha1.KMSKey) bool {
	return FormatKMSKeys(a) == FormatKMSKeys(b)
}

// kmsAgreement is the KMS v2 key every reached server writes under, per
// provider, and the newest Status answer naming it on any of them; or,
// when they cannot be taken to agree, why not, in words.
//
// A server agrees on a provider's key when its plugin last answered that
// key and the server is seen writing under it: it wrote under it after it
// last had to do with another key (apiservers.KMSKey.WritesUnderCurrent),
// or its kms-providers check, asked after its metrics were read, was ok.
// The Status answer alone proves nothing: a server records it before it
// swaps its write key, and keeps the old one when the swap fails.
//
// A server with no series for a provider that others have has not called
// its plugin since it started (or its metrics were reset): its key is
// unknown, not absent, since every server has loaded the same
// configuration and svm cannot see inside it.
func kmsAgreement(servers []Server) ([]migrationv1alpha1.KMSKey, time.Time, []string) {
	current := map[string]map[string][]string{} // provider -> key -> servers
	var why []string
	var since time.Time
	for _, s := range servers {
		for _, k := range s.KMS {
			if current[k.Provider] == nil {
				current[k.Provider] = map[string][]string{}
			}
			current[k.Provider][k.KeyIDHash] = append(current[k.Provider][k.KeyIDHash], name(s))
			if !k.WritesUnderCurrent() && !s.kmsCheckOK() {
				why = append(why, unconfirmed(s, k))
			}
			if k.StatusAt.After(since) {
				since = k.StatusAt
			}
		}
	}
	var keys []migrationv1alpha1.KMSKey
	for _, provider := range sortedKeys(current) {
		why = append(why, missing(servers, provider)...)
		byKey := current[provider]
		if len(byKey) > 1 {
			var answers []string
			for _, hash := range sortedKeys(byKey) {
				answers = append(answers, fmt.Sprintf("%s answer%s key %s", strings.Join(byKey[hash], ", "), verbEnding(len(byKey[hash])), hash))
			}
			why = append(why, fmt.Sprintf("the API servers' KMS v2 provider %s answers different keys: %s", provider, strings.Join(answers, "; ")))
			continue
		}
		for hash := range byKey {
			keys = append(keys, migrationv1alpha1.KMSKey{Provider: provider, KeyIDHash: hash})
		}
	}
	slices.Sort(why)
	return keys, since, why
}

// missing says which reached servers report no key for provider.
func missing(servers []Server, provider string) []string {
	var why []string
	for _, s := range servers {
		if s.Reached && !slices.ContainsFunc(s.KMS, func(k apiservers.KMSKey) bool { return k.Provider == provider }) {
			why = append(why, fmt.Sprintf("%s reports no key for KMS v2 provider %s (it restarted, or its /metrics were reset): waiting for its next Status call to the plugin, within a minute", name(s), provider))
		}
	}
	return why
}

// unconfirmed says why s is not taken to write under k's key.
func unconfirmed(s Server, k apiservers.KMSKey) string {
	check := "its kms-providers check was not asked"
	switch {
	case s.KMSChecked:
		check = "its kms-providers check was not ok: " + s.KMSCheckProblem
	case s.KMSCheckProblem != "":
		check += ": " + s.KMSCheckProblem
	}
	return fmt.Sprintf("%s's KMS v2 provider %s answers key %s, but the server is not seen writing under it: nothing was written under it since the last sign of another key, and %s (a server whose swap fails keeps its old key for up to 3 minutes, then fails writes)",
		name(s), k.Provider, k.KeyIDHash, check)
}

func (s Server) kmsCheckOK() bool { return s.KMSChecked && s.KMSCheckProblem == "" }

// contradictsKeys reports whether s's plugin answers, for a provider of
// keys or of its own, a key other than the one keys name: objects it
// writes are, or soon will be, under that key.
func (s Server) contradictsKeys(keys []migrationv1alpha1.KMSKey) bool {
	for _, k := range s.KMS {
		i := slices.IndexFunc(keys, func(want migrationv1alpha1.KMSKey) bool { return want.Provider == k.Provider })
		if i < 0 || keys[i].KeyIDHash != k.KeyIDHash {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// verbEnding is the ending of a verb in the present after n subjects.
func verbEnding(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}
