package apiservers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
)

// The series of an API server's /metrics that tell, per KMS v2 provider,
// the keys its plugin answered and the keys it wrote under, and the
// health check that says its last Status call took effect.
const (
	keyStatusMetric     = "apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds"
	keyUseMetric        = "apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds"
	providerLabel       = "provider_name"
	keyIDHashLabel      = "key_id_hash"
	transformationLabel = "transformation_type"
	toStorage           = "to_storage"
	kmsCheckPath        = "/readyz/kms-providers"
)

// KMSKey is what one API server says of one KMS v2 provider's keys, from
// the gauges it sets to its own clock: at every Status call to the
// provider's plugin, the time for the key ID the plugin answered; at
// every write, the time for the key ID the write was sealed under. Key
// IDs are told by their hash, "sha256:" and the hex SHA-256 of the ID.
//
// A server swaps its write key only in the check that calls Status, and
// records the Status answer just before: the key of its newest Status
// answer is the one it writes under once that check succeeded. The
// series live until the server restarts (or its /metrics are reset),
// so keys of earlier rotations are still listed, with older times.
type KMSKey struct {
	// Provider is the KMS v2 provider's name in the configuration.
	Provider string `json:"provider"`
	// KeyIDHash is the key its newest Status answer named: the current
	// key.
	KeyIDHash string `json:"keyIDHash"`
	// StatusAt is when the plugin last answered KeyIDHash.
	StatusAt time.Time `json:"statusAt,omitzero"`
	// OtherStatusAt is when the plugin last answered any other key; zero
	// when no other is listed.
	OtherStatusAt time.Time `json:"otherStatusAt,omitzero"`
	// OtherWroteAt is when the server last wrote under any other key;
	// zero when no such write is listed.
	OtherWroteAt time.Time `json:"otherWroteAt,omitzero"`
	// WroteAt is when the server last wrote under KeyIDHash; zero when
	// it has not since its series began.
	WroteAt time.Time `json:"wroteAt,omitzero"`
}

// OtherAt is the last time the server had anything to do with another
// key of the provider: a Status answer naming it, or a write under it.
func (k KMSKey) OtherAt() time.Time {
	if k.OtherWroteAt.After(k.OtherStatusAt) {
		return k.OtherWroteAt
	}
	return k.OtherStatusAt
}

// WritesUnderCurrent reports whether the server's own series show it
// writing under KeyIDHash: it wrote under it after the last time it had
// anything to do with another key. The write key changes only in a check
// that calls Status, and every Status since named KeyIDHash.
func (k KMSKey) WritesUnderCurrent() bool {
	return !k.WroteAt.IsZero() && k.WroteAt.After(k.OtherAt())
}

// parseKMS reads the KMS v2 keys of the server of idHash from families,
// by provider. Series of other servers are left out; a server that does
// not name itself (no encryption configuration) has none.
func parseKMS(families map[string]*dto.MetricFamily, idHash string) []KMSKey {
	if idHash == "" {
		return nil
	}
	status := newestByKey(families[keyStatusMetric], idHash, func(*dto.Metric) bool { return true })
	wrote := newestByKey(families[keyUseMetric], idHash, func(m *dto.Metric) bool { return label(m, transformationLabel) == toStorage })
	var out []KMSKey
	for provider, keys := range status {
		k := KMSKey{Provider: provider}
		for hash, at := range keys {
			if at.After(k.StatusAt) || (at.Equal(k.StatusAt) && hash > k.KeyIDHash) {
				k.KeyIDHash, k.StatusAt = hash, at
			}
		}
		for hash, at := range keys {
			if hash != k.KeyIDHash && at.After(k.OtherStatusAt) {
				k.OtherStatusAt = at
			}
		}
		for hash, at := range wrote[provider] {
			switch {
			case hash == k.KeyIDHash:
				k.WroteAt = at
			case at.After(k.OtherWroteAt):
				k.OtherWroteAt = at
			}
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b KMSKey) int { return strings.Compare(a.Provider, b.Provider) })
	return out
}

// newestByKey is, per provider and key hash, the value of f's series of
// the server of idHash that keep accepts.
func newestByKey(f *dto.MetricFamily, idHash string, keep func(*dto.Metric) bool) map[string]map[string]time.Time {
	out := map[string]map[string]time.Time{}
	for _, m := range f.GetMetric() {
		provider, hash := label(m, providerLabel), label(m, keyIDHashLabel)
		if label(m, idHashLabel) != idHash || provider == "" || hash == "" || !keep(m) {
			continue
		}
		at := seconds(m.GetGauge().GetValue())
		if at.IsZero() {
			continue
		}
		if out[provider] == nil {
			out[provider] = map[string]time.Time{}
		}
		if at.After(out[provider][hash]) {
			out[provider][hash] = at
		}
	}
	return out
}

// CheckKMS asks the API server behind client for its kms-providers
// readiness check, which runs the Status call of every KMS v2 provider
// (unless one ran within 20 seconds) and is ok only when the last one
// succeeded: the server then writes under the key that Status named.
// Asked after the server's metrics were read, an ok comes from the check
// that recorded the newest Status answer read, or from a later one: the
// check holds a lock while it records and swaps. It counts for the server
// the metrics told of only when endpoint is that server's own address,
// never a load balancer's, which may send the two requests to two
// servers. It returns "" when ok, else why not, in words.
func CheckKMS(ctx context.Context, client rest.Interface, endpoint string) string {
	_, err := client.Get().AbsPath(kmsCheckPath).DoRaw(ctx)
	switch {
	case err == nil:
		return ""
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fmt.Sprintf("%s%s: %s: asking it needs get on the non-resource URL %s", endpoint, kmsCheckPath, apierrors.ReasonForError(err), kmsCheckPath)
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("%s%s: not found: the server has no KMS v2 provider check", endpoint, kmsCheckPath)
	}
	return fmt.Sprintf("%s%s: %v", endpoint, kmsCheckPath, err)
}
