package framework

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// tally counts events by key, safely from many goroutines.
type tally struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *tally) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[key]++
}

func (c *tally) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}

// totalBut sums the counts of every key but those in except.
func (c *tally) totalBut(except ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for key, n := range c.counts {
		if !slices.Contains(except, key) {
			total += n
		}
	}
	return total
}

// RequestCounter counts the HTTP requests a client sends, by method, and
// notes the paths its writes succeeded at.
type RequestCounter struct {
	tally
	// succeeded counts, by method and path, the requests the server
	// answered with success.
	succeeded tally
	// flying counts, by method, the requests sent and not yet read to
	// the end (or failed); beside counts, by pair of methods, the
	// requests of the first sent while one of the second was in flight.
	mu     sync.Mutex
	flying map[string]int
	beside map[[2]string]int
}

// SentBeside returns how many requests with method were sent while one
// with other was in flight: from its sending until its answer's body was
// closed, a streamed list's included.
func (c *RequestCounter) SentBeside(method, other string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.beside[[2]string{method, other}]
}

func (c *RequestCounter) sent(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flying == nil {
		c.flying, c.beside = map[string]int{}, map[[2]string]int{}
	}
	for other, n := range c.flying {
		if n > 0 {
			c.beside[[2]string{method, other}]++
		}
	}
	c.flying[method]++
}

func (c *RequestCounter) landed(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flying[method]--
}

// closingBody ends a request's flight once, when its body is closed.
type closingBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *closingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

// Count returns the number of requests sent with method ("" for all).
func (c *RequestCounter) Count(method string) int {
	if method != "" {
		return c.get(method)
	}
	return c.totalBut()
}

// Succeeded reports whether a request with method to the URL path (such as
// /apis/example.com/v1/namespaces/ns/widgets/name) was answered with
// success.
func (c *RequestCounter) Succeeded(method, path string) bool {
	return c.succeeded.get(method+" "+path) > 0
}

// Counting returns a copy of cfg whose requests are counted.
func Counting(cfg *rest.Config) (*rest.Config, *RequestCounter) {
	counter := &RequestCounter{}
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			counter.add(req.Method)
			counter.sent(req.Method)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				counter.landed(req.Method)
				return resp, err
			}
			if resp.StatusCode/100 == 2 {
				counter.succeeded.add(req.Method + " " + req.URL.Path)
			}
			resp.Body = &closingBody{ReadCloser: resp.Body, done: func() { counter.landed(req.Method) }}
			return resp, err
		})
	})
	return c, counter
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// ServerMetric sums the API server's own samples of the counter or gauge
// name whose labels contain every one of labels (written as `key="value"`).
func (e *Env) ServerMetric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	return e.sumServerMetric(t, name, func(line string) bool {
		for _, l := range labels {
			if !strings.Contains(line, l) {
				return false
			}
		}
		return true
	})
}

// sumServerMetric sums the API server's samples of name on the lines keep
// accepts.
func (e *Env) sumServerMetric(t testing.TB, name string, keep func(line string) bool) float64 {
	t.Helper()
	raw, err := e.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(Context(t, time.Minute))
	if err != nil {
		t.Fatalf("read API server metrics: %v", err)
	}
	total := 0.0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") || !keep(line) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("parse metric line %q: %v", line, err)
		}
		total += v
	}
	return total
}

// ByteCounter counts the bytes of the response bodies a client reads.
type ByteCounter struct {
	received atomic.Int64
}

// Received is the number of response body bytes read so far.
func (c *ByteCounter) Received() int64 { return c.received.Load() }

// CountingBytes returns a copy of cfg whose response bodies are counted,
// after decompression: what the client really has to hold.
func CountingBytes(cfg *rest.Config) (*rest.Config, *ByteCounter) {
	counter := &ByteCounter{}
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if resp != nil && resp.Body != nil {
				resp.Body = &countingBody{ReadCloser: resp.Body, n: &counter.received}
			}
			return resp, err
		})
	})
	return c, counter
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
