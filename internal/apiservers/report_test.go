package apiservers

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const (
	idA     = "sha256:aaaa"
	config1 = "sha256:1111"
	config2 = "sha256:2222"
)

// preamble is the part of an API server's metrics around the series Parse
// reads, including names that start like them.
const preamble = `# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 12
# HELP process_start_time_seconds_total Not the start time.
# TYPE process_start_time_seconds_total counter
process_start_time_seconds_total 99
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.7641e+09
`

// The gauges Parse reads, as kube-apiserver names them.
const (
	configInfoGauge = "apiserver_encryption_config_controller_last_config_info"
	reloadTimeGauge = "apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds"
)

// gauge is the text of gauge name with series, each its labels and value.
func gauge(name string, series ...string) string {
	text := "# TYPE " + name + " gauge\n"
	for _, s := range series {
		text += name + s + "\n"
	}
	return text
}

// infoSeries says that the API server of idHash loaded the encryption
// configuration of hash.
func infoSeries(idHash, hash string) string {
	return `{apiserver_id_hash="` + idHash + `",hash="` + hash + `"} 1`
}

// reloadSeries says when the API server of idHash last reloaded its
// encryption configuration with status (success or failure).
func reloadSeries(idHash, status, at string) string {
	return `{apiserver_id_hash="` + idHash + `",status="` + status + `"} ` + at
}

func TestParse(t *testing.T) {
	start := time.Unix(1764100000, 0).UTC()
	reloaded := time.Unix(1764103600, 500_000_000).UTC()
	failed := time.Unix(1764107200, 0).UTC()
	for _, tc := range []struct {
		name, metrics string
		want          Report
		wantErr       string
	}{{
		name:    "no encryption configuration",
		metrics: preamble,
		want:    Report{LoadedAt: start},
	}, {
		name: "loaded at start, never reloaded",
		metrics: preamble + "# HELP " + configInfoGauge + " [ALPHA] Information about the last applied encryption configuration with hash as label, split by apiserver identity.\n" +
			gauge(configInfoGauge, infoSeries(idA, config1)),
		want: Report{IDHash: idA, ConfigHash: config1, LoadedAt: start},
	}, {
		name:    "reloaded",
		metrics: preamble + gauge(reloadTimeGauge, reloadSeries(idA, "success", "1.7641036005e+09")) + gauge(configInfoGauge, infoSeries(idA, config2)),
		want:    Report{IDHash: idA, ConfigHash: config2, LoadedAt: reloaded},
	}, {
		name: "a reload failed after the last success",
		metrics: preamble + gauge(reloadTimeGauge, reloadSeries(idA, "failure", "1.7641072e+09"), reloadSeries(idA, "success", "1.7641036005e+09")) +
			gauge(configInfoGauge, infoSeries(idA, config2)),
		want: Report{IDHash: idA, ConfigHash: config2, LoadedAt: reloaded, ReloadFailedAt: failed},
	}, {
		name: "a failure before the last success is over",
		metrics: preamble + gauge(reloadTimeGauge, reloadSeries(idA, "failure", "1.7641e+09"), reloadSeries(idA, "success", "1.7641036005e+09")) +
			gauge(configInfoGauge, infoSeries(idA, config2)),
		want: Report{IDHash: idA, ConfigHash: config2, LoadedAt: reloaded},
	}, {
		name:    "two configurations at once",
		metrics: gauge(configInfoGauge, infoSeries(idA, config1), infoSeries(idA, config2)),
		wantErr: "has 2 series, want 1",
	}, {
		name:    "series about another server",
		metrics: gauge(reloadTimeGauge, reloadSeries("sha256:bbbb", "success", "1.7641036005e+09")) + gauge(configInfoGauge, infoSeries(idA, config2)),
		wantErr: "is about API server sha256:bbbb",
	}, {
		name:    "not metrics",
		metrics: "apiserver_encryption_config_controller_last_config_info{ oops\n",
		wantErr: "parse metrics",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.metrics))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse: error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApproxTime(time.Millisecond)); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIDHash(t *testing.T) {
	// The value kube-apiserver labels its metrics with for this ID
	// (sha256sum of the ID's bytes).
	const id = "apiserver-abc"
	if got, want := IDHash(id), "sha256:9c8e6f16b6d50bad3e7146c5faf6d3fad872da0f775760381dbe3284476aa8f2"; got != want {
		t.Errorf("IDHash(%q) = %q, want %q", id, got, want)
	}
}

func TestEndpoints(t *testing.T) {
	ids := []Identity{{ID: "a", PeerAddress: "10.0.0.1:6443"}, {ID: "b"}, {ID: "c", PeerAddress: "10.0.0.3:6443"}}
	if diff := cmp.Diff([]string{"https://lb:6443", "https://10.0.0.1:6443", "https://10.0.0.3:6443"},
		Endpoints(nil, "https://lb:6443/", ids)); diff != "" {
		t.Errorf("discovered (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"https://x:1", "https://y:2"},
		Endpoints([]string{"https://x:1", "https://y:2/", "https://x:1"}, "https://lb:6443", ids)); diff != "" {
		t.Errorf("given (-want +got):\n%s", diff)
	}
}
