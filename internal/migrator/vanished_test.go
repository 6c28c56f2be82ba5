package migrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// answer is how the fake API server answers a request once its event has
// happened (vanishingServer.after writes).
type answer int

const (
	ok            answer = iota // as a served resource would
	objectMissing               // 404 with a status naming the object
	pageNotFound                // kube-apiserver's last handler: plain-text 404
	unavailable                 // the aggregator's 503 for an APIService it cannot reach
)

// vanishingServer serves one namespaced resource, widgets.example.com, with
// n objects, until svm has written after of them; from then on it answers
// writes with write and lists with list.
type vanishingServer struct {
	n, after    int
	write, list answer

	mu      sync.Mutex
	written int
	// probes counts the lists of one object, which the engine sends only
	// to ask whether the resource is still served.
	probes int
}

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

func (s *vanishingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const discovery, collection = "/apis/example.com/v1", "/apis/example.com/v1/widgets"
	object := "/apis/example.com/v1/namespaces/ns/widgets/"
	s.mu.Lock()
	defer s.mu.Unlock()
	happened := s.written >= s.after
	switch {
	case r.Method == http.MethodGet && r.URL.Path == discovery:
		writeJSON(w, http.StatusOK, metav1.APIResourceList{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
			{Name: "widgets", Namespaced: true, Kind: "Widget", Verbs: metav1.Verbs{"list", "patch", "watch"}},
		}})
	case r.Method == http.MethodGet && r.URL.Path == collection:
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		if limit == 1 {
			s.probes++
		}
		if happened && s.list != ok {
			s.fail(w, s.list, "")
			return
		}
		s.serveList(w, r.URL.Query().Get("continue"), limit)
	case r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, object):
		name := strings.TrimPrefix(r.URL.Path, object)
		if happened && s.write != ok {
			s.fail(w, s.write, name)
			return
		}
		s.written++
		// A new resourceVersion: the object was re-stored.
		writeJSON(w, http.StatusOK, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "2"}})
	default:
		http.NotFound(w, r)
	}
}

// serveList lists limit objects from the index in token.
func (s *vanishingServer) serveList(w http.ResponseWriter, token string, limit int) {
	from, _ := strconv.Atoi(token)
	to := min(s.n, from+limit)
	list := metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	if to < s.n {
		list.Continue = strconv.Itoa(to)
	}
	for i := from; i < to; i++ {
		list.Items = append(list.Items, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: fmt.Sprintf("w-%03d", i), UID: "uid", ResourceVersion: "1",
		}})
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *vanishingServer) fail(w http.ResponseWriter, a answer, name string) {
	switch a {
	case objectMissing:
		writeJSON(w, http.StatusNotFound, metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: http.StatusNotFound,
			Reason: metav1.StatusReasonNotFound, Message: fmt.Sprintf("widgets.example.com %q not found", name),
			Details: &metav1.StatusDetails{Name: name, Group: "example.com", Kind: "widgets"},
		})
	case pageNotFound:
		http.Error(w, "404 page not found", http.StatusNotFound)
	case unavailable:
		http.Error(w, "service unavailable", http.StatusServiceUnavailable)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// TestResourceGoneMidRunFails runs the engine against a fake API server
// whose resource, or whose objects, go away mid-run. A 404 counts an object
// gone only when it names the object, or when a list shows the resource
// still served; a resource that answers 404 to a list too (its CRD
// deleted, its APIService removed) fails the run with ResourceNotFound,
// none of the objects left counted gone, whether a write or the next
// chunk's list met it first.
func TestResourceGoneMidRunFails(t *testing.T) {
	const n = 12
	tests := []struct {
		name        string
		chunk       int64
		after       int
		write, list answer
		// wantReason is the TerminalError's reason; "" with wantStop: the
		// run stopped, to be resumed; "" without: it ended well.
		wantReason string
		wantStop   bool
		// wantRestored and wantGone: a run that stopped counts its last
		// completed chunk only.
		wantRestored, wantGone int64
		// inFlight, for a run that stops mid-chunk, is how many of the
		// wantRestored writes may go uncounted: the stop cancels the
		// writes in flight, and one the server carried out whose answer
		// was not read yet is not counted. Counts never say more than
		// the server did.
		inFlight   int64
		wantProbes int
	}{
		{name: "objects deleted: their 404s name them", chunk: n, after: 4, write: objectMissing, list: ok, wantRestored: 4, wantGone: n - 4},
		{name: "a 404 naming nothing, the resource still served", chunk: n, after: 4, write: pageNotFound, list: ok, wantRestored: 4, wantGone: n - 4, wantProbes: n - 4},
		// The run was in its last chunk: counting its objects gone would
		// have ended it Succeeded.
		{name: "resource gone during the last chunk's writes", chunk: n, after: 4, write: pageNotFound, list: pageNotFound, wantReason: ReasonResourceNotFound, wantRestored: 4, inFlight: 3, wantProbes: 1},
		{name: "resource gone between chunks", chunk: 4, after: 4, write: pageNotFound, list: pageNotFound, wantReason: ReasonResourceNotFound, wantRestored: 4},
		{name: "whether it is served cannot be told", chunk: n, after: 4, write: pageNotFound, list: unavailable, wantStop: true, wantProbes: 2},
		{name: "APIService unavailable: transient, as before", chunk: n, after: 4, write: unavailable, list: ok, wantStop: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &vanishingServer{n: n, after: tt.after, write: tt.write, list: tt.list}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			m, err := New(&rest.Config{Host: ts.URL, QPS: -1}, Options{
				ChunkSize: tt.chunk, Workers: 4, DisablePacing: true, DisableChangeWatch: true,
				Retry: Backoff{Initial: time.Millisecond, Max: time.Millisecond, Attempts: 2},
				// A rate cap, however high, makes the engine list the next
				// chunk only once the one before is written: the event
				// then comes between the two, never during a list.
				Limiter: rate.NewLimiter(1e6, 1000),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := m.Run(ctx, Request{Resource: widgets})

			var terminal *TerminalError
			var partial *ObjectsFailedError
			switch {
			case tt.wantReason != "":
				if !errors.As(err, &terminal) || terminal.Reason != tt.wantReason {
					t.Fatalf("Run: %v, want a TerminalError with reason %s", err, tt.wantReason)
				}
				if !strings.Contains(err.Error(), "the server could not find the requested resource") {
					t.Errorf("error %q lacks the server's answer", err)
				}
			case tt.wantStop:
				if err == nil || errors.As(err, &terminal) || errors.As(err, &partial) {
					t.Fatalf("Run: %v, want a stop to be resumed", err)
				}
			case err != nil:
				t.Fatalf("Run: %v", err)
			}
			p := res.Progress
			if p.Gone != tt.wantGone || p.Restored > tt.wantRestored || p.Restored < tt.wantRestored-tt.inFlight || p.Failed != 0 {
				t.Errorf("progress %+v: want %d re-stored (%d of them perhaps uncounted, in flight at the stop), %d gone, none failed", p.Counts, tt.wantRestored, tt.inFlight, tt.wantGone)
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if srv.probes != tt.wantProbes {
				t.Errorf("%d lists asked whether the resource is served, want %d", srv.probes, tt.wantProbes)
			}
		})
	}
}
