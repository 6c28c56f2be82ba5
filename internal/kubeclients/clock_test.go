package kubeclients

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

func TestSkewFrom(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "", want: 0},
		{in: "5m", want: 5 * time.Minute},
		{in: "-90s", want: -90 * time.Second},
		{in: "five minutes", wantErr: true},
		{in: "300", wantErr: true},
	} {
		got, err := skewFrom(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("skewFrom(%q) = %s, %v; want %s, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestReadingOf(t *testing.T) {
	received := time.Date(2026, 3, 1, 12, 5, 0, 400e6, time.UTC)
	for _, tc := range []struct {
		date   string
		ok     bool
		server time.Time
	}{
		{date: "Sun, 01 Mar 2026 12:00:07 GMT", ok: true, server: time.Date(2026, 3, 1, 12, 0, 7, 0, time.UTC)},
		// Every form net/http accepts (RFC 850, asctime).
		{date: "Sunday, 01-Mar-26 12:00:07 GMT", ok: true, server: time.Date(2026, 3, 1, 12, 0, 7, 0, time.UTC)},
		{date: "Sun Mar  1 12:00:07 2026", ok: true, server: time.Date(2026, 3, 1, 12, 0, 7, 0, time.UTC)},
		{date: "", ok: false},
		{date: "yesterday", ok: false},
		{date: "2026-03-01T12:00:07Z", ok: false},
	} {
		r, ok := readingOf(tc.date, received)
		if ok != tc.ok || (ok && (!r.date.Equal(tc.server) || !r.received.Equal(received))) {
			t.Errorf("readingOf(%q) = %+v, %v; want date %s, %v", tc.date, r, ok, tc.server, tc.ok)
		}
	}
}

// TestServerClockIsNeverAheadOfTheServer: whatever this machine's clock
// says, the time read is the server's, never later, and at most the Date's
// second and the answer's way back earlier: a wait measured on it is
// never shorter than the server's, and longer by little.
func TestServerClockIsNeverAheadOfTheServer(t *testing.T) {
	stamped := time.Date(2026, 3, 1, 12, 0, 7, 0, time.UTC) // the server's time, to the second
	for _, tc := range []struct {
		name string
		// skew is how far this machine's clock is ahead of the server's.
		skew time.Duration
		// fraction is past the second the Date says, when the server
		// stamped it; latency how long the answer then took to come.
		fraction, latency time.Duration
		// elapsed is how long after the answer the clock is read.
		elapsed time.Duration
	}{
		{name: "clocks agree", fraction: 0, latency: time.Millisecond},
		{name: "workstation 5 minutes fast", skew: 5 * time.Minute, fraction: 300 * time.Millisecond, latency: 20 * time.Millisecond, elapsed: 90 * time.Second},
		{name: "workstation 2 minutes fast, answered at the end of a second", skew: 2 * time.Minute, fraction: 999 * time.Millisecond, latency: 5 * time.Millisecond, elapsed: time.Second},
		{name: "workstation 5 minutes slow", skew: -5 * time.Minute, fraction: 500 * time.Millisecond, latency: 200 * time.Millisecond, elapsed: 2 * time.Minute},
		{name: "skew below a second", skew: 700 * time.Millisecond, fraction: 100 * time.Millisecond, latency: 50 * time.Millisecond, elapsed: 10 * time.Second},
		{name: "read hours later", skew: 3 * time.Minute, fraction: 0, latency: time.Millisecond, elapsed: 5 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			serverAtStamp := stamped.Add(tc.fraction)
			received := serverAtStamp.Add(tc.latency).Add(tc.skew) // on this machine's clock
			r, ok := readingOf(stamped.Format(http.TimeFormat), received)
			if !ok {
				t.Fatal("the Date was not read")
			}
			now := received.Add(tc.elapsed) // on this machine's clock
			serverNow := serverAtStamp.Add(tc.latency).Add(tc.elapsed)
			got := r.at(now)
			if got.After(serverNow) {
				t.Errorf("read %s, ahead of the server's %s: a wait would be %s short", got, serverNow, got.Sub(serverNow))
			}
			if behind, bound := serverNow.Sub(got), time.Second+tc.latency; behind > bound {
				t.Errorf("read %s, %s behind the server's %s, more than the Date's second and the way back (%s)", got, behind, serverNow, bound)
			}
		})
	}
}

func TestServerClockLearnsFromKubeAPIServerOnly(t *testing.T) {
	for _, tc := range []struct {
		host, path string
		want       bool
	}{
		{host: "https://127.0.0.1:6443", path: "/api", want: true},
		{host: "https://127.0.0.1:6443", path: "/api/v1/namespaces/default", want: true},
		{host: "https://127.0.0.1:6443", path: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", want: true},
		{host: "https://127.0.0.1:6443", path: "/apis/migration.k8s.io/v1alpha1/storageversionmigrations", want: true},
		{host: "https://127.0.0.1:6443", path: "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", want: true},
		// An aggregated API server's answers carry its own clock.
		{host: "https://127.0.0.1:6443", path: "/apis/metrics.k8s.io/v1beta1/nodes", want: false},
		{host: "https://127.0.0.1:6443", path: "/apis/apiextensions.k8s.io.example.com/v1/things", want: false},
		{host: "https://127.0.0.1:6443", path: "/apiserver/x", want: false},
		{host: "https://127.0.0.1:6443", path: "/metrics", want: false},
		// A server behind a path (a proxy's kubeconfig).
		{host: "https://proxy.example.com/k8s/clusters/c-1", path: "/k8s/clusters/c-1/api/v1/namespaces", want: true},
		{host: "https://proxy.example.com/k8s/clusters/c-1/", path: "/k8s/clusters/c-1/apis/apiextensions.k8s.io/v1", want: true},
		{host: "https://proxy.example.com/k8s/clusters/c-1", path: "/api/v1/namespaces", want: false},
		{host: "https://proxy.example.com/k8s/clusters/c-1", path: "/k8s/clusters/c-1/apis/metrics.k8s.io/v1beta1", want: false},
	} {
		c := newServerClock(&rest.Config{Host: tc.host}, time.Now)
		if got := c.learnsFrom(tc.path); got != tc.want {
			t.Errorf("%s: learnsFrom(%q) = %v, want %v", tc.host, tc.path, got, tc.want)
		}
	}
}

// TestServerClockThroughTheSetsClients: a Set's clients tell its Clock
// the server's time, from answers of kube-apiserver's own APIs only, and
// each answer replaces the last; before the first, it is this machine's
// clock.
func TestServerClockThroughTheSetsClients(t *testing.T) {
	var serverSkew atomic.Int64 // how far the server's Date is from this machine's clock
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/api/v1/namespaces/no-date" {
			w.Header()["Date"] = nil // net/http then sends none
		} else {
			w.Header().Set("Date", time.Now().Add(time.Duration(serverSkew.Load())).UTC().Format(http.TimeFormat))
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WrapTransport != nil || s.Config == cfg {
		t.Fatal("New changed the configuration it was given instead of a copy")
	}
	ctx := context.Background()
	answer := func(skew time.Duration, name string) {
		serverSkew.Store(int64(skew))
		_, _ = s.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	}
	// reads says the clock reads the server's time: never later, and
	// earlier by at most the Date's second and an answer's way back (a
	// second, for a loaded machine).
	reads := func(skew time.Duration, what string) {
		t.Helper()
		before := time.Now().Add(skew)
		got := s.Clock.Now()
		after := time.Now().Add(skew)
		if earliest := before.Add(-2 * time.Second); got.After(after) || got.Before(earliest) {
			t.Errorf("%s: the clock reads %s, want the server's time, between %s and %s", what, got, earliest, after)
		}
	}
	if s.Clock.last.Load() != nil {
		t.Fatal("the clock learnt before any answer")
	}
	reads(0, "before any answer, this machine's clock")

	answer(-5*time.Minute, "default")
	reads(-5*time.Minute, "after an answer of a server 5 minutes behind")

	// An aggregated API server's answer teaches nothing.
	serverSkew.Store(int64(time.Hour))
	_, _ = s.Dynamic.Resource(schema.GroupVersionResource{Group: "metrics.k8s.io", Version: "v1beta1", Resource: "nodes"}).Get(ctx, "x", metav1.GetOptions{})
	reads(-5*time.Minute, "after an aggregated API server's answer")

	// An answer without a Date keeps what the last one taught.
	answer(time.Hour, "no-date")
	reads(-5*time.Minute, "after an answer without a Date")

	// The server's clock stepped: the next answer is followed.
	answer(3*time.Minute, "default")
	reads(3*time.Minute, "after the server's clock stepped 8 minutes ahead")
}
