package apiservers

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/kubeclients"
)

// Key ID hashes as kube-apiserver labels them: "sha256:" and the hex
// SHA-256 of the key ID ("1" and "2" here).
const (
	key1 = "sha256:6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b"
	key2 = "sha256:d4735e3a265e16eee03f59718b9b5d03019c07d8b6c51f90da3a666eec13ab35"
)

// The envelope encryption gauges as kube-apiserver 1.37 prints them.
const (
	keyStatusHelp = "# HELP apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds [ALPHA] The last time in seconds when a keyID was returned by the Status RPC call.\n"
	keyUseHelp    = "# HELP apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds [ALPHA] The last time in seconds when a keyID was used.\n"
)

// statusSeries says the Status call of provider, on the server of
// idHash, last answered key at.
func statusSeries(idHash, key, provider, at string) string {
	return fmt.Sprintf(`{apiserver_id_hash=%q,key_id_hash=%q,provider_name=%q} %s`, idHash, key, provider, at)
}

// useSeries says the server of idHash last read (from_storage) or wrote
// (to_storage) a value under provider's key at.
func useSeries(idHash, key, provider, transformation, at string) string {
	return fmt.Sprintf(`{apiserver_id_hash=%q,key_id_hash=%q,provider_name=%q,transformation_type=%q} %s`, idHash, key, provider, transformation, at)
}

func kmsMetrics(status []string, use []string) string {
	return preamble + gauge(configInfoGauge, infoSeries(idA, config1)) +
		keyUseHelp + gauge("apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds", use...) +
		keyStatusHelp + gauge("apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds", status...)
}

func TestParseKMS(t *testing.T) {
	at := func(sec int64) time.Time { return time.Unix(sec, 0).UTC() }
	for _, tc := range []struct {
		name, metrics string
		want          []KMSKey
	}{{
		name: "no KMS v2 provider",
		want: nil, metrics: preamble + gauge(configInfoGauge, infoSeries(idA, config1)),
	}, {
		name: "one key, read and written",
		metrics: kmsMetrics([]string{statusSeries(idA, key1, "kms1", "1.7641e+09")}, []string{
			useSeries(idA, key1, "kms1", "from_storage", "1.76410003e+09"),
			useSeries(idA, key1, "kms1", "to_storage", "1.76410002e+09"),
		}),
		want: []KMSKey{{Provider: "kms1", KeyIDHash: key1, StatusAt: at(1764100000), WroteAt: at(1764100020)}},
	}, {
		name: "a rotation: the newest Status answer is the current key",
		metrics: kmsMetrics([]string{
			statusSeries(idA, key1, "kms1", "1.7641e+09"),
			statusSeries(idA, key2, "kms1", "1.76410006e+09"),
		}, []string{
			useSeries(idA, key1, "kms1", "to_storage", "1.76410001e+09"),
			useSeries(idA, key2, "kms1", "to_storage", "1.76410007e+09"),
			// Reads under the old key say nothing of what is written.
			useSeries(idA, key1, "kms1", "from_storage", "1.76410009e+09"),
		}),
		want: []KMSKey{{Provider: "kms1", KeyIDHash: key2, StatusAt: at(1764100060), OtherStatusAt: at(1764100000), OtherWroteAt: at(1764100010), WroteAt: at(1764100070)}},
	}, {
		name: "the new key answered, nothing written under it yet",
		metrics: kmsMetrics([]string{
			statusSeries(idA, key1, "kms1", "1.7641e+09"),
			statusSeries(idA, key2, "kms1", "1.76410006e+09"),
		}, []string{useSeries(idA, key1, "kms1", "to_storage", "1.76410001e+09")}),
		want: []KMSKey{{Provider: "kms1", KeyIDHash: key2, StatusAt: at(1764100060), OtherStatusAt: at(1764100000), OtherWroteAt: at(1764100010)}},
	}, {
		name: "two providers, by name; another server's series left out",
		metrics: kmsMetrics([]string{
			statusSeries(idA, key2, "zeta", "1.7641e+09"),
			statusSeries(idA, key1, "alpha", "1.7641e+09"),
			statusSeries("sha256:bbbb", key2, "alpha", "1.7642e+09"),
		}, nil),
		want: []KMSKey{{Provider: "alpha", KeyIDHash: key1, StatusAt: at(1764100000)}, {Provider: "zeta", KeyIDHash: key2, StatusAt: at(1764100000)}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.metrics))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.KMS); diff != "" {
				t.Errorf("KMS (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWritesUnderCurrent(t *testing.T) {
	t0 := time.Unix(1764100000, 0)
	for _, tc := range []struct {
		name string
		key  KMSKey
		want bool
	}{
		{"nothing written", KMSKey{StatusAt: t0}, false},
		{"written, no other key", KMSKey{StatusAt: t0, WroteAt: t0.Add(time.Second)}, true},
		{"written after the other key's last Status", KMSKey{OtherStatusAt: t0, WroteAt: t0.Add(time.Second)}, true},
		{"written before the other key's last Status", KMSKey{OtherStatusAt: t0, WroteAt: t0.Add(-time.Second)}, false},
		// A write that read the write key just before the check swapped
		// it ends under the old key after the new key's Status answer.
		{"written before a write under the other key", KMSKey{OtherStatusAt: t0, OtherWroteAt: t0.Add(2 * time.Second), WroteAt: t0.Add(time.Second)}, false},
	} {
		if got := tc.key.WritesUnderCurrent(); got != tc.want {
			t.Errorf("%s: WritesUnderCurrent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCheckKMS: the kms-providers check's answer, in words.
func TestCheckKMS(t *testing.T) {
	for _, tc := range []struct {
		name    string
		check   int
		problem string
	}{
		{name: "ok", check: http.StatusOK},
		{name: "failing", check: http.StatusInternalServerError, problem: "/readyz/kms-providers: "},
		{name: "forbidden", check: http.StatusForbidden, problem: "needs get on the non-resource URL /readyz/kms-providers"},
		{name: "no KMS v2 provider", check: http.StatusNotFound, problem: "the server has no KMS v2 provider check"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/readyz/kms-providers" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tc.check)
				fmt.Fprint(w, "[-]kms-providers failed: reason withheld\n")
			}))
			defer srv.Close()
			ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
			client, err := kubeclients.NewEndpoints(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}).For(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			got := CheckKMS(context.Background(), client, srv.URL)
			if (tc.problem == "") != (got == "") || !strings.Contains(got, tc.problem) {
				t.Errorf("CheckKMS = %q, want %q", got, tc.problem)
			}
		})
	}
}
