package manager

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProfilingHandlersOnlyWhenAsked(t *testing.T) {
	if h := profilingHandlers(false); h != nil {
		t.Fatalf("without --profiling: %d handlers, want none", len(h))
	}
	mux := http.NewServeMux()
	for path, h := range profilingHandlers(true) {
		mux.Handle(path, h)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/heap?debug=1", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "heap profile") {
		t.Fatalf("GET /debug/pprof/heap: %d %.200s", rec.Code, rec.Body.String())
	}
}
