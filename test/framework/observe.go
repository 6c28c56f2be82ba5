package framework

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svm-project/svm/test/controlplane"
)

// FreeAddress returns a loopback address with a port that was free a
// moment ago, for an svm endpoint (--metrics-bind-address and the like).
func FreeAddress(t testing.TB) string {
	t.Helper()
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
}

// Get requests http://addr/path and returns the status code and body; code
// 0 when nothing answered.
func Get(t testing.TB, addr, path string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil
	}
	return resp.StatusCode, body
}

// Metrics are the metric families of one scrape.
type Metrics map[string]*dto.MetricFamily

// Scrape reads the Prometheus metrics served at http://addr/metrics.
func Scrape(t testing.TB, addr string) Metrics {
	t.Helper()
	code, body := Get(t, addr, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("scrape %s: status %d", addr, code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse metrics of %s: %v", addr, err)
	}
	return families
}

// Value is the value of the counter or gauge name with labels (a subset of
// its labels), 0 when there is no such series.
func (m Metrics) Value(name string, labels ...string) float64 {
	if metric := m.find(name, labels); metric != nil {
		switch {
		case metric.Counter != nil:
			return metric.Counter.GetValue()
		case metric.Gauge != nil:
			return metric.Gauge.GetValue()
		}
	}
	return 0
}

// Has says whether the metric name has a series with labels (a subset of
// its labels), where Value cannot tell an absent series from one at 0.
func (m Metrics) Has(name string, labels ...string) bool {
	return m.find(name, labels) != nil
}

// HistogramCount is the number of observations of the histogram name with
// labels, 0 when there is no such series.
func (m Metrics) HistogramCount(name string, labels ...string) uint64 {
	if metric := m.find(name, labels); metric != nil && metric.Histogram != nil {
		return metric.Histogram.GetSampleCount()
	}
	return 0
}

// find returns the series of name that has labels, given as name, value,
// name, value...
func (m Metrics) find(name string, labels []string) *dto.Metric {
	family := m[name]
	if family == nil {
		return nil
	}
	for _, metric := range family.Metric {
		if hasLabels(metric, labels) {
			return metric
		}
	}
	return nil
}

func hasLabels(metric *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range metric.Label {
			found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
		}
		if !found {
			return false
		}
	}
	return true
}

// Events lists the events.k8s.io/v1 Events regarding the object of kind
// and name, in every namespace (events about cluster-scoped objects are
// kept in "default").
func (e *Env) Events(t testing.TB, kind, name string) []eventsv1.Event {
	t.Helper()
	list, err := e.Kube.EventsV1().Events(metav1.NamespaceAll).List(Context(t, time.Minute), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Kind == kind && ev.Regarding.Name == name {
			out = append(out, ev)
		}
	}
	return out
}

// EventReasons counts the reasons of events, as "Reason" or, for events
// of another type than Normal, "Type/Reason".
func EventReasons(events []eventsv1.Event) map[string]int {
	out := map[string]int{}
	for _, ev := range events {
		key := ev.Reason
		if ev.Type != "Normal" {
			key = fmt.Sprintf("%s/%s", ev.Type, ev.Reason)
		}
		out[key]++
	}
	return out
}

// Sum is the sum of the counter or gauge name over every series that has
// labels (a subset of its labels, as name, value, ...), such as a counter
// over all its reasons.
func (m Metrics) Sum(name string, labels ...string) float64 {
	family := m[name]
	if family == nil {
		return 0
	}
	total := 0.0
	for _, metric := range family.Metric {
		if !hasLabels(metric, labels) {
			continue
		}
		switch {
		case metric.Counter != nil:
			total += metric.Counter.GetValue()
		case metric.Gauge != nil:
			total += metric.Gauge.GetValue()
		}
	}
	return total
}
