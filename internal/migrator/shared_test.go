package migrator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// busyServer serves resources of example.com/v1, each with n objects, and
// answers every write after latency, counting the writes in flight at the
// server whatever their resource.
type busyServer struct {
	resources []string
	n         int
	latency   time.Duration

	mu                     sync.Mutex
	inFlight, most, writes int
}

func (s *busyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const discovery, prefix = "/apis/example.com/v1", "/apis/example.com/v1/"
	switch {
	case r.Method == http.MethodGet && r.URL.Path == discovery:
		list := metav1.APIResourceList{GroupVersion: "example.com/v1"}
		for _, name := range s.resources {
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: name, Kind: name, Verbs: metav1.Verbs{"list", "patch", "watch"}})
		}
		writeJSON(w, http.StatusOK, list)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, prefix):
		resource := strings.TrimPrefix(r.URL.Path, prefix)
		list := metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
		for i := range s.n {
			list.Items = append(list.Items, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%03d", resource, i), UID: "uid", ResourceVersion: "1",
			}})
		}
		writeJSON(w, http.StatusOK, list)
	case r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, prefix):
		s.mu.Lock()
		s.inFlight++
		s.most = max(s.most, s.inFlight)
		s.mu.Unlock()
		time.Sleep(s.latency)
		s.mu.Lock()
		s.inFlight--
		s.writes++
		s.mu.Unlock()
		name := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		writeJSON(w, http.StatusOK, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "2"}})
	default:
		http.NotFound(w, r)
	}
}

// TestMigrationsSideBySideShareOnePacer runs migrations of several
// resources at once on one Migrator: the API server never has more of
// their writes in flight than one migration alone may send (Workers),
// since one pacer judges the server for all of them; each still writes
// every object. Pacers of their own would send Workers each.
func TestMigrationsSideBySideShareOnePacer(t *testing.T) {
	const workers, objects = 4, 40
	srv := &busyServer{resources: []string{"widgets", "gadgets", "gizmos"}, n: objects, latency: 5 * time.Millisecond}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	m, err := New(&rest.Config{Host: ts.URL, QPS: -1}, Options{
		Workers: workers, DisableChangeWatch: true,
		Retry: Backoff{Initial: time.Millisecond, Max: time.Millisecond, Attempts: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	results := make([]Result, len(srv.resources))
	errs := make([]error, len(srv.resources))
	for i, name := range srv.resources {
		wg.Go(func() {
			results[i], errs[i] = m.Run(ctx, Request{Resource: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: name}})
		})
	}
	wg.Wait()
	for i, name := range srv.resources {
		if errs[i] != nil {
			t.Fatalf("%s: %v", name, errs[i])
		}
		if p := results[i].Progress; p.Restored != objects {
			t.Errorf("%s: %d objects re-stored, want %d", name, p.Restored, objects)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.writes != objects*len(srv.resources) {
		t.Errorf("the server carried out %d writes, want %d", srv.writes, objects*len(srv.resources))
	}
	if srv.most > workers {
		t.Errorf("%d writes in flight at the server at once from %d migrations, want at most %d (one pacer's window)", srv.most, len(srv.resources), workers)
	}
	if srv.most < 2 {
		t.Errorf("at most %d write in flight: the migrations did not run side by side", srv.most)
	}
}

// TestPacerForgetsAfterAnIdlePause: a write after more than idleForget
// with nothing in flight starts from the initial window with nothing
// measured, as a migration alone always did; a shorter pause keeps what
// was measured.
func TestPacerForgetsAfterAnIdlePause(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	p := newPacer(64, clock.now)
	p.decide(PacerGrow, 20)
	tk, err := p.acquire(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.release(tk, 10*time.Millisecond, answered)
	clock.advance(idleForget - time.Second)
	if tk, err = p.acquire(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if w := p.window(); w != 20 {
		t.Errorf("window %d after a pause shorter than idleForget, want 20 kept", w)
	}
	p.release(tk, 10*time.Millisecond, answered)
	clock.advance(idleForget + time.Second)
	if _, err = p.acquire(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if st := p.state(); st.Window != initialWindow || st.SmoothedLatency != 0 || st.Knee != 0 {
		t.Errorf("state %+v after an idle pause, want the initial window with nothing measured", st)
	}
}
