package migrator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
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
// server whatever their resource. Writes of the failing resources are
// answered with a 500 after latency, as a webhook that times out is.
type busyServer struct {
	resources []string
	failing   []string
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
		s.patch(w, strings.Split(strings.TrimPrefix(r.URL.Path, prefix), "/"))
	default:
		http.NotFound(w, r)
	}
}

// patch answers a write to path, resource/name.
func (s *busyServer) patch(w http.ResponseWriter, path []string) {
	s.mu.Lock()
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	time.Sleep(s.latency)
	s.mu.Lock()
	s.inFlight--
	fails := slices.Contains(s.failing, path[0])
	if !fails {
		s.writes++
	}
	s.mu.Unlock()
	if fails {
		writeJSON(w, http.StatusInternalServerError, metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonInternalError, Code: http.StatusInternalServerError,
			Message: "failed calling webhook: context deadline exceeded",
		})
		return
	}
	writeJSON(w, http.StatusOK, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: path[len(path)-1], ResourceVersion: "2"}})
}

// runSideBySide runs a migration of each of srv's resources at once on one
// Migrator of workers, until the migrations of the resources not failing
// have ended, and returns their results, by resource.
func runSideBySide(t *testing.T, srv *busyServer, workers int) map[string]Result {
	t.Helper()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	m, err := New(&rest.Config{Host: ts.URL, QPS: -1}, Options{
		Workers: workers, DisableChangeWatch: true,
		// Failing writes are retried for as long as the test runs.
		Retry: Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Attempts: 1 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	failingCtx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var healthy, failing sync.WaitGroup
	results := map[string]Result{}
	for _, name := range srv.resources {
		gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: name}
		if slices.Contains(srv.failing, name) {
			failing.Go(func() { _, _ = m.Run(failingCtx, Request{Resource: gvr}) })
			continue
		}
		healthy.Go(func() {
			res, err := m.Run(ctx, Request{Resource: gvr})
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			mu.Lock()
			results[name] = res
			mu.Unlock()
		})
	}
	healthy.Wait()
	stop()
	failing.Wait()
	return results
}

// TestMigrationsSideBySideShareTheWrites runs migrations of several
// resources at once on one Migrator: the API server never has more of
// their writes in flight than one migration alone may send (Workers),
// since they share the places; each still writes every object. Pacers
// alone would send Workers each.
func TestMigrationsSideBySideShareTheWrites(t *testing.T) {
	const workers, objects = 4, 40
	srv := &busyServer{resources: []string{"widgets", "gadgets", "gizmos"}, n: objects, latency: 5 * time.Millisecond}
	results := runSideBySide(t, srv, workers)
	for _, name := range srv.resources {
		if p := results[name].Progress; p.Restored != objects {
			t.Errorf("%s: %d objects re-stored, want %d", name, p.Restored, objects)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.writes != objects*len(srv.resources) {
		t.Errorf("the server carried out %d writes, want %d", srv.writes, objects*len(srv.resources))
	}
	if srv.most > workers {
		t.Errorf("%d writes in flight at the server at once from %d migrations, want at most %d (one migration's workers)", srv.most, len(srv.resources), workers)
	}
	if srv.most < 2 {
		t.Errorf("at most %d write in flight: the migrations did not run side by side", srv.most)
	}
}

// TestFailingWritesOfOneResourceDoNotStarveTheOthers: one resource whose
// every write fails after a while (a webhook timing out), retried for as
// long as the test runs, beside two that write: those finish, every object
// written, within the shared places. One pacer for all starved them: the
// failures dropped its window to one write, which the failing resource's
// retries held.
func TestFailingWritesOfOneResourceDoNotStarveTheOthers(t *testing.T) {
	const workers, objects = 4, 40
	srv := &busyServer{
		resources: []string{"widgets", "gadgets", "gizmos"}, failing: []string{"widgets"},
		n: objects, latency: 20 * time.Millisecond,
	}
	results := runSideBySide(t, srv, workers)
	for _, name := range []string{"gadgets", "gizmos"} {
		if p := results[name].Progress; p.Restored != objects {
			t.Errorf("%s: %d objects re-stored beside the failing widgets, want %d", name, p.Restored, objects)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.most > workers {
		t.Errorf("%d writes in flight at the server at once, want at most %d", srv.most, workers)
	}
}
