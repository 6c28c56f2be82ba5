package apiservers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// TestScrapeReadsAServersMetricsAsAStream: Scrape reads a server's
// /metrics, however large (they grow with the resources it serves), and
// tells a refusal apart, as it did when it read them whole.
func TestScrapeReadsAServersMetricsAsAStream(t *testing.T) {
	var big strings.Builder
	big.WriteString(preamble)
	big.WriteString("# TYPE apiserver_watch_cache_capacity gauge\n")
	for i := range 200000 { // 14 MB of series Parse passes over
		fmt.Fprintf(&big, "apiserver_watch_cache_capacity{group=\"g%06d.example.com\",resource=\"things\"} 100\n", i)
	}
	big.WriteString(gauge(configInfoGauge, infoSeries(idA, config1)))
	status := http.StatusOK
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != metricsPath {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		if status == http.StatusOK {
			_, _ = io.WriteString(w, big.String())
		}
	}))
	defer server.Close()
	client, err := rest.RESTClientFor(&rest.Config{Host: server.URL, ContentConfig: rest.ContentConfig{
		GroupVersion: &schema.GroupVersion{Version: "v1"}, NegotiatedSerializer: scheme.Codecs.WithoutConversion(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r, err := Scrape(context.Background(), client, "https://10.0.0.1:6443")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	// Read whole, the answer alone would be 14 MB of memory, and more
	// as the buffer it is read into grows.
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > uint64(big.Len())/4 {
		t.Errorf("Scrape allocated %d bytes for %d bytes of metrics: it reads them whole", allocated, big.Len())
	}
	if r.IDHash != idA || r.ConfigHash != config1 || r.Endpoint != "https://10.0.0.1:6443" || r.LoadedAt.IsZero() {
		t.Errorf("report %+v, want the configuration %s of server %s, started", r, config1, idA)
	}
	status = http.StatusForbidden
	if _, err := Scrape(context.Background(), client, "https://10.0.0.1:6443"); err == nil || !strings.Contains(err.Error(), "needs get on the non-resource URL /metrics") {
		t.Errorf("forbidden: %v", err)
	}
}
