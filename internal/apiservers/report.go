package apiservers

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
)

// The series of an API server's /metrics that tell its encryption
// configuration, and when it was loaded.
const (
	configInfoMetric    = "apiserver_encryption_config_controller_last_config_info"
	reloadTimeMetric    = "apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds"
	processStartMetric  = "process_start_time_seconds"
	idHashLabel         = "apiserver_id_hash"
	hashLabel           = "hash"
	statusLabel         = "status"
	reloadSuccess       = "success"
	reloadFailure       = "failure"
	metricsPath         = "/metrics"
	maxMetricsLineBytes = 1 << 20
)

// Report is what one API server says about its encryption configuration.
type Report struct {
	// Endpoint is where it was read.
	Endpoint string
	// IDHash is the server's apiserver_id_hash (see IDHash).
	IDHash string
	// ConfigHash is the hash of the encryption configuration file the
	// server has loaded ("sha256:<hex>"), "" when it has none: it stores
	// everything unencrypted.
	ConfigHash string
	// LoadedAt is when it loaded that configuration: its last successful
	// automatic reload, else its start. Zero when it does not tell.
	LoadedAt time.Time
	// ReloadFailedAt is when its last automatic reload failed, if that was
	// after LoadedAt: the file on disk is then not what it uses.
	ReloadFailedAt time.Time
	// KMS are the keys of each KMS v2 provider the server has called, by
	// provider name; none when its configuration has no KMS v2 provider,
	// or before its first Status call since it started.
	KMS []KMSKey
	// KMSChecked says that the server's kms-providers readiness check was
	// asked after its metrics were read (CheckKMS), and KMSCheckProblem
	// why it was not ok, or why it was not asked; "" when it was ok.
	KMSChecked      bool
	KMSCheckProblem string
}

// Scrape reads the report of the API server at endpoint (an https URL),
// through client, which reaches that server (kubeclients.Endpoints).
func Scrape(ctx context.Context, client rest.Interface, endpoint string) (Report, error) {
	// Read as a stream, never whole: a server's metrics grow with the
	// resources it serves (9 MB with a hundred CRDs), and Parse keeps
	// only the lines of the few families it reads.
	body, err := client.Get().AbsPath(metricsPath).Stream(ctx)
	if err != nil {
		return Report{}, metricsError(endpoint, err)
	}
	defer body.Close()
	r, err := Parse(body)
	if err != nil {
		return Report{}, fmt.Errorf("read %s%s: %w", endpoint, metricsPath, err)
	}
	r.Endpoint = endpoint
	return r, nil
}

// readMetrics reads the /metrics of the API server at endpoint, through
// client, which reaches that server (kubeclients.Endpoints).
func readMetrics(ctx context.Context, client rest.Interface, endpoint string) ([]byte, error) {
	raw, err := client.Get().AbsPath(metricsPath).DoRaw(ctx)
	if err != nil {
		return nil, metricsError(endpoint, err)
	}
	return raw, nil
}

// metricsError is the error of a failed read of endpoint's /metrics.
func metricsError(endpoint string, err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		// The answer to a non-resource URL carries no Status to explain it.
		return fmt.Errorf("read %s%s: %s: reading it needs get on the non-resource URL %s", endpoint, metricsPath, apierrors.ReasonForError(err), metricsPath)
	}
	return fmt.Errorf("read %s%s: %w", endpoint, metricsPath, err)
}

// Parse reads a report from an API server's metrics in the Prometheus
// text format. A server without an encryption configuration has no
// configuration series; it is told by its other series' apiserver_id_hash
// if it has any, else the report has no IDHash.
func Parse(in io.Reader) (Report, error) {
	families, err := parseFamilies(in, configInfoMetric, reloadTimeMetric, processStartMetric, keyStatusMetric, keyUseMetric)
	if err != nil {
		return Report{}, err
	}
	var r Report
	if f := families[configInfoMetric]; f != nil {
		// The server keeps one series, its last configuration.
		if n := len(f.GetMetric()); n != 1 {
			return Report{}, fmt.Errorf("%s has %d series, want 1", configInfoMetric, n)
		}
		m := f.GetMetric()[0]
		r.IDHash, r.ConfigHash = label(m, idHashLabel), label(m, hashLabel)
		if r.ConfigHash == "" {
			return Report{}, fmt.Errorf("%s has no %s label", configInfoMetric, hashLabel)
		}
	}
	var success, failure time.Time
	if f := families[reloadTimeMetric]; f != nil {
		for _, m := range f.GetMetric() {
			if id := label(m, idHashLabel); r.IDHash == "" {
				r.IDHash = id
			} else if id != r.IDHash {
				return Report{}, fmt.Errorf("%s is about API server %s, the configuration about %s", reloadTimeMetric, id, r.IDHash)
			}
			switch label(m, statusLabel) {
			case reloadSuccess:
				success = seconds(m.GetGauge().GetValue())
			case reloadFailure:
				failure = seconds(m.GetGauge().GetValue())
			}
		}
	}
	r.LoadedAt = success
	if f := families[processStartMetric]; r.LoadedAt.IsZero() && f != nil && len(f.GetMetric()) > 0 {
		r.LoadedAt = seconds(f.GetMetric()[0].GetGauge().GetValue())
	}
	if failure.After(r.LoadedAt) {
		r.ReloadFailedAt = failure
	}
	r.KMS = parseKMS(families, r.IDHash)
	return r, nil
}

// parseFamilies parses only the named families: an API server's metrics
// run to megabytes, and the text parser would build all of them.
func parseFamilies(in io.Reader, names ...string) (map[string]*dto.MetricFamily, error) {
	var kept bytes.Buffer
	s := bufio.NewScanner(in)
	s.Buffer(make([]byte, 64*1024), maxMetricsLineBytes)
	for s.Scan() {
		// The line's bytes, not a string of them: most lines are passed
		// over, and a string would be allocated for each.
		line := s.Bytes()
		name := line
		if rest, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
			name = rest
		} else if rest, ok := bytes.CutPrefix(line, []byte("# TYPE ")); ok {
			name = rest
		}
		for _, n := range names {
			if bytes.HasPrefix(name, []byte(n)) && len(name) > len(n) && (name[len(n)] == ' ' || name[len(n)] == '{') {
				kept.Write(line)
				kept.WriteByte('\n')
				break
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(&kept)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return families, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func seconds(v float64) time.Time {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return time.Time{}
	}
	sec, frac := math.Modf(v)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC()
}
