package framework

import (
	"net/http"
	"net/url"
	"testing"

	"k8s.io/client-go/rest"
)

// Split is a copy of cfg whose reads (GET: lists, gets and watches) go to
// the API server at reads and every other request to the one at writes,
// as behind a load balancer that spreads requests over the servers of a
// highly available control plane. The servers must share cfg's
// credentials and serving certificate, as a control plane's peers do.
func Split(t testing.TB, cfg *rest.Config, reads, writes string) *rest.Config {
	t.Helper()
	r, err := url.Parse(reads)
	if err != nil {
		t.Fatalf("reads server %q: %v", reads, err)
	}
	w, err := url.Parse(writes)
	if err != nil {
		t.Fatalf("writes server %q: %v", writes, err)
	}
	out := rest.CopyConfig(cfg)
	wrap := out.WrapTransport
	out.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if wrap != nil {
			rt = wrap(rt)
		}
		return splitTransport{next: rt, reads: r.Host, writes: w.Host}
	}
	return out
}

type splitTransport struct {
	next          http.RoundTripper
	reads, writes string
}

func (s splitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Host = s.writes
	if req.Method == http.MethodGet {
		req.URL.Host = s.reads
	}
	req.Host = req.URL.Host
	return s.next.RoundTrip(req)
}
