package apiservers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// The series of an API server's /metrics that tell which clients still
// use an API version: every request it served, by group, version and
// resource, and the long-running ones (watches) open now.
const (
	requestsMetric    = "apiserver_request_total"
	longRunningMetric = "apiserver_longrunning_requests"
)

// Usage is what one API server says about the requests it served for one
// resource in one version.
type Usage struct {
	// Endpoint is where it was read.
	Endpoint string
	// IDHash is the server's apiserver_id_hash when its metrics carry it.
	IDHash string
	// Since is when the server started: its counters count from then.
	// Zero when it does not tell.
	Since time.Time
	// Requests counts every request for the resource in the version the
	// server answered since it started, whatever the verb and the answer.
	Requests float64
	// Open counts the long-running requests (watches) for it open now.
	Open float64
}

// ScrapeUsage reads, from the API server at endpoint (an https URL)
// through client, which reaches that server (kubeclients.Endpoints), how
// many requests it served for gvr.
func ScrapeUsage(ctx context.Context, client rest.Interface, endpoint string, gvr schema.GroupVersionResource) (Usage, error) {
	raw, err := readMetrics(ctx, client, endpoint)
	if err != nil {
		return Usage{}, err
	}
	u, err := ParseUsage(bytes.NewReader(raw), gvr)
	if err != nil {
		return Usage{}, fmt.Errorf("read %s%s: %w", endpoint, metricsPath, err)
	}
	u.Endpoint = endpoint
	return u, nil
}

// ParseUsage reads the usage of gvr from an API server's metrics in the
// Prometheus text format. Subresources count as the resource's.
func ParseUsage(in io.Reader, gvr schema.GroupVersionResource) (Usage, error) {
	families, err := parseFamilies(in, requestsMetric, longRunningMetric, processStartMetric, configInfoMetric)
	if err != nil {
		return Usage{}, err
	}
	var u Usage
	about := func(m *dto.Metric) bool {
		return label(m, "group") == gvr.Group && label(m, "version") == gvr.Version && label(m, "resource") == gvr.Resource
	}
	if f := families[requestsMetric]; f != nil {
		for _, m := range f.GetMetric() {
			if about(m) {
				u.Requests += m.GetCounter().GetValue()
			}
		}
	}
	if f := families[longRunningMetric]; f != nil {
		for _, m := range f.GetMetric() {
			if about(m) {
				u.Open += m.GetGauge().GetValue()
			}
		}
	}
	if f := families[processStartMetric]; f != nil && len(f.GetMetric()) > 0 {
		u.Since = seconds(f.GetMetric()[0].GetGauge().GetValue())
	}
	if f := families[configInfoMetric]; f != nil && len(f.GetMetric()) > 0 {
		u.IDHash = label(f.GetMetric()[0], idHashLabel)
	}
	return u, nil
}
