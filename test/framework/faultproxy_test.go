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

// The proxy cannot see whether its client read an answer whole: the
// client's timeout may run out on an answer the proxy sent quickly. The
// records of requests sent through Config say what the client got.
func TestFaultProxyRecordsWhatItsClientGot(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success","message":"a long enough answer to be cut in half"}`)
	}))
	defer backend.Close()
	e := &Env{Config: &rest.Config{Host: backend.URL}}
	proxy := e.StartFaultProxy(t, FaultOptions{})
	proxy.Decide(func(r *http.Request) (Fault, time.Duration, bool) {
		return Truncate, 0, r.URL.Path == "/truncated"
	})
	client, err := rest.HTTPClientFor(proxy.Config)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string, read bool) {
		resp, err := client.Get(proxy.Config.Host + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		if read {
			_, _ = io.ReadAll(resp.Body)
		}
	}
	get("/whole", true)
	get("/truncated", true)
	get("/unread", false)
	// A watch's client closes it early by design: nothing is said of it.
	get("/watched?watch=true", false)
	// Another client's requests carry no number: nothing is known of them.
	if resp, err := http.Get(proxy.Config.Host + "/other"); err == nil {
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	proxy.WaitIdle(t)

	got := map[string]bool{}
	for _, r := range proxy.Requests() {
		got[r.Path] = r.ClientError
	}
	want := map[string]bool{"/whole": false, "/truncated": true, "/unread": true, "/watched": false, "/other": false}
	if len(got) != len(want) {
		t.Errorf("records of %v, want %v", got, want)
	}
	for path, clientError := range want {
		if got[path] != clientError {
			t.Errorf("%s: ClientError = %v, want %v", path, got[path], clientError)
		}
	}
}

// A watch is a stream that its client closes by design: its record ends
// when the client hangs up, and does not say the client gave up on it.
func TestFaultProxyDoesNotCallAClosedWatchAbandoned(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"type":"BOOKMARK"}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer backend.Close()
	e := &Env{Config: &rest.Config{Host: backend.URL}}
	proxy := e.StartFaultProxy(t, FaultOptions{})

	resp, err := http.Get(proxy.Config.Host + "/apis/example.com/v1/widgets?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resp.Body.Read(make([]byte, 64)); err != nil {
		t.Fatalf("read the first event: %v", err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		log := proxy.Requests()
		if len(log) == 1 && log[0].Duration > 0 {
			if log[0].Abandoned || !log[0].Forwarded {
				t.Errorf("record %+v, want a forwarded watch, not abandoned", log[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch's record did not end within 10s of its close: %+v", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
