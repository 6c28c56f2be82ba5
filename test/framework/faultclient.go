package framework

import (
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
)

// attemptHeader carries the number the fault proxy's own client gives each
// request it sends, so that the proxy's record of the request can say what
// the client got: the proxy alone cannot tell an answer the client read
// whole from one it gave up on (its timeout runs from before the proxy
// sees the request to after the proxy sent the last byte, and on a loaded
// machine either end can take long).
const attemptHeader = "X-Fault-Proxy-Attempt"

// clientOutcomes records, for each numbered request of the proxy's
// client, whether the client got an error instead of the whole answer.
type clientOutcomes struct {
	next atomic.Int64
	mu   sync.Mutex
	errs map[int64]bool
}

func (c *clientOutcomes) done(attempt int64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.errs == nil {
		c.errs = map[int64]bool{}
	}
	c.errs[attempt] = err != nil
}

func (c *clientOutcomes) failed(attempt int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errs[attempt]
}

// numbering is the client side: it numbers each request and records how
// its answer ended for the client.
type numbering struct {
	next     http.RoundTripper
	outcomes *clientOutcomes
}

func (n numbering) RoundTrip(req *http.Request) (*http.Response, error) {
	if isWatch(req) {
		// A watch is a stream without an end: its client closes it early
		// by design.
		return n.next.RoundTrip(req)
	}
	attempt := n.outcomes.next.Add(1)
	req = req.Clone(req.Context())
	req.Header.Set(attemptHeader, strconv.FormatInt(attempt, 10))
	resp, err := n.next.RoundTrip(req)
	if err != nil {
		n.outcomes.done(attempt, err)
		return nil, err
	}
	resp.Body = &outcomeBody{ReadCloser: resp.Body, done: func(err error) { n.outcomes.done(attempt, err) }}
	return resp, nil
}

// outcomeBody reports once how reading an answer ended: nil at its end,
// the error that broke it (a truncated body, the client's timeout), or
// io.ErrUnexpectedEOF when the client closed it before the end.
type outcomeBody struct {
	io.ReadCloser
	once sync.Once
	done func(error)
}

func (b *outcomeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.once.Do(func() { b.done(nil) })
	case err != nil:
		b.once.Do(func() { b.done(err) })
	}
	return n, err
}

func (b *outcomeBody) Close() error {
	b.once.Do(func() { b.done(io.ErrUnexpectedEOF) })
	return b.ReadCloser.Close()
}
