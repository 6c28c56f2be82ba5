package framework

import (
	"net/http"
	"sync"

	"k8s.io/client-go/rest"
)

// RequestCounter counts the HTTP requests a client sends, by method.
type RequestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

// Count returns the number of requests sent with method ("" for all).
func (c *RequestCounter) Count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if method != "" {
		return c.counts[method]
	}
	total := 0
	for _, n := range c.counts {
		total += n
	}
	return total
}

// Counting returns a copy of cfg whose requests are counted.
func Counting(cfg *rest.Config) (*rest.Config, *RequestCounter) {
	counter := &RequestCounter{counts: map[string]int{}}
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			counter.mu.Lock()
			counter.counts[req.Method]++
			counter.mu.Unlock()
			return rt.RoundTrip(req)
		})
	})
	return c, counter
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
