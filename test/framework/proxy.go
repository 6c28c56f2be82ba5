package framework

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Proxy sits between a client and the real API server on loopback and can
// answer some requests itself instead of forwarding them.
type Proxy struct {
	// Config reaches the API server through the proxy.
	Config *rest.Config

	mu        sync.Mutex
	intercept func(*http.Request) (status int, header http.Header, ok bool)
	modify    func(*http.Response) error
	log       []ProxyEvent
}

// ProxyEvent records one request the proxy saw.
type ProxyEvent struct {
	Method, Path string
	Time         time.Time
	// Status is what the proxy answered itself, or 0 when forwarded.
	Status int
}

// StartProxy starts a proxy to e's API server for the duration of the test.
func (e *Env) StartProxy(t testing.TB) *Proxy {
	t.Helper()
	rp := e.reverseProxy(t)
	p := &Proxy{}
	rp.ModifyResponse = func(r *http.Response) error {
		p.mu.Lock()
		modify := p.modify
		p.mu.Unlock()
		if modify == nil {
			return nil
		}
		return modify(r)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		ev := ProxyEvent{Method: r.Method, Path: r.URL.Path, Time: time.Now()}
		var status int
		var header http.Header
		intercepted := false
		if p.intercept != nil {
			status, header, intercepted = p.intercept(r)
		}
		if intercepted {
			ev.Status = status
		}
		p.log = append(p.log, ev)
		if p.modify != nil {
			// Ask for plain bodies, so that the modifier can read them.
			r.Header.Del("Accept-Encoding")
		}
		p.mu.Unlock()
		if intercepted {
			for k, v := range header {
				w.Header()[k] = v
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(&metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status:   metav1.StatusFailure, Code: int32(status), Reason: statusReasons[status],
				Message: "injected by the test proxy",
			})
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.Config = &rest.Config{Host: srv.URL, QPS: -1}
	return p
}

// Intercept sets the function that decides which requests the proxy answers
// itself; nil forwards everything.
func (p *Proxy) Intercept(f func(*http.Request) (status int, header http.Header, ok bool)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.intercept = f
}

// ModifyResponse sets a function that may change the API server's answers
// before they reach the client; nil passes them unchanged.
func (p *Proxy) ModifyResponse(f func(*http.Response) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.modify = f
}

// StartSVM runs the svm binary with args against the API server through
// the proxy (see Env.StartSVM).
func (p *Proxy) StartSVM(t testing.TB, args ...string) *Process {
	t.Helper()
	return startSVM(t, proxyKubeconfig(t, p.Config.Host), args)
}

// Kubeconfig writes a kubeconfig that reaches the API server through the
// proxy, for svm run in the test's process (SVM) or as one (RunSVM).
func (p *Proxy) Kubeconfig(t testing.TB) string {
	t.Helper()
	return proxyKubeconfig(t, p.Config.Host)
}

// proxyKubeconfig writes a kubeconfig for a proxy at host. It carries no
// credentials: the proxy adds the admin's on the way to the API server.
func proxyKubeconfig(t testing.TB, host string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: host}
	cfg.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	cfg.CurrentContext = "proxy"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// Events returns the requests seen so far.
func (p *Proxy) Events() []ProxyEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ProxyEvent(nil), p.log...)
}

var statusReasons = map[int]metav1.StatusReason{
	http.StatusTooManyRequests:     metav1.StatusReasonTooManyRequests,
	http.StatusInternalServerError: metav1.StatusReasonInternalError,
	http.StatusServiceUnavailable:  metav1.StatusReasonServiceUnavailable,
}

// reverseProxy forwards to e's API server with the admin's credentials,
// whatever credentials the client sent.
func (e *Env) reverseProxy(t testing.TB) *httputil.ReverseProxy {
	t.Helper()
	transport, err := rest.TransportFor(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(e.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	return rp
}

// Requests counts the requests with method (GET, PATCH, ...) to objects of
// resource (not to their subresources) that reached the proxy, whether the
// API server answered them or not: what the client sent. Unlike the API
// server's own counters, this count survives the API server's restarts.
func (p *Proxy) Requests(method, resource string) int {
	n := 0
	for _, ev := range p.Events() {
		if ev.Method == method && objectResource(ev.Path) == resource {
			n++
		}
	}
	return n
}

// objectResource is the resource an API path addresses, "" for a path to
// a subresource or to no resource at all.
func objectResource(path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(segs) > 2 && segs[0] == "api":
		segs = segs[2:]
	case len(segs) > 3 && segs[0] == "apis":
		segs = segs[3:]
	default:
		return ""
	}
	// namespaces/<ns>/<resource>/...; namespaces/<ns> alone is a namespace.
	if len(segs) > 2 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	if len(segs) > 2 {
		return ""
	}
	return segs[0]
}
