package framework

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// A client that gives up in the middle of an answer makes ReverseProxy
// abort the proxy's handler; the request's record must end all the same,
// so that WaitIdle returns instead of waiting for it until its deadline.
func TestFaultProxyEndsTheRecordOfAnAnswerCutShort(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":`)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		_, _ = io.WriteString(w, `"Status"}`)
	}))
	defer backend.Close()
	e := &Env{Config: &rest.Config{Host: backend.URL}}
	proxy := e.StartFaultProxy(t, FaultOptions{})

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, proxy.Config.Host+"/api/v1/namespaces/default/configmaps/c", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatal("the whole answer arrived, want it cut short by the client's deadline")
		}
	}
	start := time.Now()
	proxy.WaitIdle(t)
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("WaitIdle took %s", waited)
	}
	log := proxy.Requests()
	if len(log) != 1 || !log[0].Abandoned || !log[0].Forwarded {
		t.Errorf("records %+v, want one forwarded request the client abandoned", log)
	}
}
