package framework

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// Fault is what the fault proxy does to one request instead of forwarding
// it faithfully. Each is something a network, a load balancer or an
// overloaded API server does to clients in real life.
type Fault string

// The faults a FaultProxy injects.
const (
	// NoFault forwards the request and its answer unchanged.
	NoFault Fault = ""
	// Reset reads the request and resets the connection without forwarding
	// it: the API server never sees it.
	Reset Fault = "reset"
	// InternalError answers 500 without forwarding.
	InternalError Fault = "500"
	// Unavailable answers 503 without forwarding.
	Unavailable Fault = "503"
	// Throttle answers 429 with Retry-After without forwarding.
	Throttle Fault = "429"
	// Slow forwards the request after a delay.
	Slow Fault = "slow"
	// Stall forwards the request, sends the answer's headers and half its
	// body, and then nothing until the client gives up.
	Stall Fault = "stall"
	// Truncate forwards the request, sends the answer with a Content-Length
	// larger than the bytes that follow, and closes the connection.
	Truncate Fault = "truncate"
)

// Faults are all the faults, in the order FaultRates are drawn.
var Faults = []Fault{Reset, InternalError, Unavailable, Throttle, Slow, Stall, Truncate}

// Fails reports whether a request with this fault leaves the client without
// an answer it can use, so that it has to send the request again. Of the
// failing faults, Stall and Truncate reach the API server: it acted on the
// request, only the answer was lost.
func (f Fault) Fails() bool { return f != NoFault && f != Slow }

// FaultRates are the probabilities that a request gets each fault. They
// must not sum to more than 1; the rest is forwarded unchanged.
type FaultRates map[Fault]float64

// FaultOptions configure a FaultProxy.
type FaultOptions struct {
	// Seed seeds the random choice of faults; 0 takes one from the clock,
	// and SVM_FAULT_SEED overrides both. The seed is logged. Requests race
	// each other, so a seed repeats the sequence of draws, not which
	// request gets which fault.
	Seed int64
	// Rates are the faults' probabilities per request.
	Rates FaultRates
	// RetryAfter is what Throttle asks the client to wait, in whole
	// seconds as the header allows. Default 1s.
	RetryAfter time.Duration
	// Delay is how long Slow holds a request. Default 300ms.
	Delay time.Duration
	// MaxStall bounds how long Stall waits for the client to give up, so
	// that a client without a timeout cannot hang a test forever; then the
	// proxy closes the connection. Default 5m.
	MaxStall time.Duration
	// Match selects the requests that may be faulted; the others are
	// always forwarded unchanged. Default: every request but watches,
	// whose streams have no end to stall or truncate.
	Match func(*http.Request) bool
}

// FaultRecord is one request the fault proxy saw and what became of it.
type FaultRecord struct {
	Method, Path, Query string
	// Time is when the request arrived; Duration is how long the proxy
	// took to answer it (for Stall, to send half the answer), 0 while in
	// progress.
	Time     time.Time
	Duration time.Duration
	Fault    Fault
	// RetryAfter is what a Throttle asked the client to wait.
	RetryAfter time.Duration
	// Delay is how long a Slow held the request before forwarding it, or
	// a Seated one held the seat before forwarding it.
	Delay time.Duration
	// Seated reports a request forwarded through the one seat of
	// OneAtATime.
	Seated bool
	// Forwarded reports whether the proxy sent the request on to the API
	// server.
	Forwarded bool
	// Status is the status code the client was sent (for Stall and
	// Truncate, with a broken body); 0 when it was sent none.
	Status int
	// Abandoned reports that the client gave up waiting before the answer
	// was complete: its own timeout ran out on a slow API server. The
	// proxy knows only when net/http noticed the hang-up in time, so a
	// client may have given up on an answer that is not marked. A watch,
	// a stream that its client closes by design, is never marked.
	Abandoned bool
	// ClientError reports that the client got an error instead of the
	// whole answer: a broken connection or body, or its own timeout. It is
	// known only for requests sent through Config, watches aside; a
	// request from another client (svm started from a kubeconfig) is never
	// marked.
	ClientError bool

	// attempt is the number Config's client gave the request, 0 for
	// another client's.
	attempt int64
}

// Key identifies a request for counting repeats: the same method, path
// and query (a list's continue token included) sent again is a retry.
func (r FaultRecord) Key() string { return r.Method + " " + r.Path + "?" + r.Query }

// FaultLog is the requests a fault proxy saw, in the order they arrived.
type FaultLog []FaultRecord

// Filter returns the records for which keep is true.
func (l FaultLog) Filter(keep func(FaultRecord) bool) FaultLog {
	var out FaultLog
	for _, r := range l {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// Between returns the records of requests that arrived in [from, to).
func (l FaultLog) Between(from, to time.Time) FaultLog {
	return l.Filter(func(r FaultRecord) bool { return !r.Time.Before(from) && r.Time.Before(to) })
}

// Count returns the number of records with fault f (NoFault: the requests
// forwarded unchanged).
func (l FaultLog) Count(f Fault) int {
	return len(l.Filter(func(r FaultRecord) bool { return r.Fault == f }))
}

// Failed returns the number of requests that left the client without a
// usable answer: broken by a fault (see Fault.Fails), abandoned, or ended
// in an error at the client.
func (l FaultLog) Failed() int {
	return len(l.Filter(func(r FaultRecord) bool { return r.Fault.Fails() || r.Abandoned || r.ClientError }))
}

// Writes returns the number of svm's writes that reached the API server:
// PUT (an object rewritten as listed) and PATCH (managedFields moved off
// a retired version).
func (l FaultLog) Writes() int {
	return len(l.Filter(func(r FaultRecord) bool {
		return (r.Method == http.MethodPut || r.Method == http.MethodPatch) && r.Forwarded
	}))
}

// Repeats returns the number of requests that repeat an earlier one (the
// same Key): the requests the client had to send again.
func (l FaultLog) Repeats() int {
	seen := make(map[string]bool, len(l))
	repeats := 0
	for _, r := range l {
		if seen[r.Key()] {
			repeats++
		}
		seen[r.Key()] = true
	}
	return repeats
}

// String counts the requests by fault, for the test log.
func (l FaultLog) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests: %d forwarded unchanged", len(l), l.Count(NoFault))
	for _, f := range Faults {
		if n := l.Count(f); n > 0 {
			fmt.Fprintf(&b, ", %d %s", n, f)
		}
	}
	if n := len(l.Filter(func(r FaultRecord) bool { return r.Abandoned })); n > 0 {
		fmt.Fprintf(&b, "; %d abandoned by the client", n)
	}
	if n := len(l.Filter(func(r FaultRecord) bool { return r.ClientError && !r.Fault.Fails() && !r.Abandoned })); n > 0 {
		fmt.Fprintf(&b, "; %d answered but ended in an error at the client", n)
	}
	return b.String()
}

// FaultProxy sits on loopback between a client and the real API server and
// breaks some of the requests it forwards: at random with FaultRates, all of
// them with FailAll, or as a test decides with Decide. It records every
// request with its time and outcome.
type FaultProxy struct {
	// Config reaches the API server through the proxy, with client-go's
	// rate limiter off.
	Config *rest.Config
	// Seed is the seed of the random choice of faults.
	Seed int64

	forward    *httputil.ReverseProxy
	retryAfter time.Duration
	delay      time.Duration
	maxStall   time.Duration
	match      func(*http.Request) bool
	stop       chan struct{}

	mu sync.Mutex
	// inFlight are the records of requests in progress, watches aside.
	inFlight map[int]bool
	rng      *rand.Rand
	rates    FaultRates
	failAll  Fault
	// seatHold, when set, makes the proxy a server of one seat (see
	// OneAtATime); seat holds that seat while it is free.
	seatHold time.Duration
	seat     chan struct{}
	decide   func(*http.Request) (Fault, time.Duration, bool)
	log      FaultLog
	client   clientOutcomes
}

// StartFaultProxy starts a fault proxy to e's API server for the duration
// of the test.
func (e *Env) StartFaultProxy(t testing.TB, opts FaultOptions) *FaultProxy {
	t.Helper()
	seed := opts.Seed
	if s := os.Getenv("SVM_FAULT_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("SVM_FAULT_SEED: %v", err)
		}
	}
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	p := &FaultProxy{
		Seed:       seed,
		forward:    e.reverseProxy(t),
		retryAfter: max(opts.RetryAfter.Round(time.Second), time.Second),
		delay:      opts.Delay,
		maxStall:   opts.MaxStall,
		match:      opts.Match,
		stop:       make(chan struct{}),
		inFlight:   map[int]bool{},
		seat:       make(chan struct{}, 1),
		rng:        rand.New(rand.NewPCG(uint64(seed), 0)),
	}
	p.seat <- struct{}{}
	// The reverse proxy logs every request its client gave up on, which
	// is what faults are for; the records say all that matters.
	p.forward.ErrorLog = log.New(io.Discard, "", 0)
	if p.delay <= 0 {
		p.delay = 300 * time.Millisecond
	}
	if p.maxStall <= 0 {
		p.maxStall = 5 * time.Minute
	}
	if p.match == nil {
		p.match = func(r *http.Request) bool { return !isWatch(r) }
	}
	p.SetRates(opts.Rates)
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(srv.Close)
	// Cleanups run last first: release stalled requests, or Close would
	// wait for them.
	t.Cleanup(func() { close(p.stop) })
	p.Config = &rest.Config{Host: srv.URL, QPS: -1}
	p.Config.Wrap(func(rt http.RoundTripper) http.RoundTripper { return numbering{next: rt, outcomes: &p.client} })
	t.Logf("fault proxy %s: seed %d (SVM_FAULT_SEED=%d draws the same faults)", srv.URL, seed, seed)
	return p
}

// SetRates replaces the faults' probabilities; nil forwards everything.
func (p *FaultProxy) SetRates(rates FaultRates) {
	total := 0.0
	for f, rate := range rates {
		if rate < 0 || !slices.Contains(Faults, f) {
			panic(fmt.Sprintf("fault proxy: bad rate %v for fault %q", rate, f))
		}
		total += rate
	}
	if total > 1 {
		panic(fmt.Sprintf("fault proxy: rates sum to %v, more than 1", total))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rates = rates
}

// FailAll gives every request the proxy may fault the fault f, until it is
// called with NoFault.
func (p *FaultProxy) FailAll(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failAll = f
}

// SlowAll holds every request the proxy may fault for delay before
// forwarding it (Slow), until FailAll(NoFault); delay stays what Slow
// holds a request for afterwards.
func (p *FaultProxy) SlowAll(delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failAll, p.delay = Slow, delay
}

// OneAtATime makes the proxy a saturated server with one seat: the
// requests it may fault are forwarded one at a time, each holding the seat
// for hold before it is forwarded and until it is answered, while the
// others queue. Latency then grows with every request in flight and the
// rate does not: more in flight only wait longer. 0 ends it.
func (p *FaultProxy) OneAtATime(hold time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seatHold = hold
}

// Decide sets a function that chooses the fault for a request before the
// random draw: when it returns ok, the request gets fault f, and a
// Throttle asks for retryAfter (0: the proxy's default). It is called with
// the proxy's lock held, one request at a time, so it may keep state
// without locking; nil removes it.
func (p *FaultProxy) Decide(decide func(r *http.Request) (f Fault, retryAfter time.Duration, ok bool)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.decide = decide
}

// WaitIdle waits until the proxy has finished with every request but
// watches, so that the records say what became of each: a request the
// client gave up on may still be on its way to or from the API server.
func (p *FaultProxy) WaitIdle(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		p.mu.Lock()
		var pending []string
		for i := range p.inFlight {
			r := p.log[i]
			pending = append(pending, fmt.Sprintf("%s %s?%s (fault %q, since %s)", r.Method, r.Path, r.Query, r.Fault, r.Time.Format(time.StampMilli)))
		}
		p.mu.Unlock()
		if len(pending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fault proxy: requests still in flight after a minute: %s", strings.Join(pending, "; "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Requests returns what the proxy has seen so far.
func (p *FaultProxy) Requests() FaultLog {
	p.mu.Lock()
	log := append(FaultLog(nil), p.log...)
	p.mu.Unlock()
	for i := range log {
		log[i].ClientError = log[i].attempt != 0 && p.client.failed(log[i].attempt)
	}
	return log
}

// StartSVM runs the svm binary with args against the API server through
// the proxy (see Env.StartSVM).
func (p *FaultProxy) StartSVM(t testing.TB, args ...string) *Process {
	t.Helper()
	return startSVM(t, proxyKubeconfig(t, p.Config.Host), args)
}

func isWatch(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

// begin chooses the fault for r and records its arrival; it returns the
// record's index for end.
func (p *FaultProxy) begin(r *http.Request) (int, FaultRecord) {
	rec := FaultRecord{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery}
	rec.attempt, _ = strconv.ParseInt(r.Header.Get(attemptHeader), 10, 64)
	r.Header.Del(attemptHeader)
	match := p.match(r)
	p.mu.Lock()
	defer p.mu.Unlock()
	rec.Time = time.Now()
	if match {
		rec.Fault, rec.RetryAfter = p.choose(r)
	}
	if rec.Fault != Throttle {
		rec.RetryAfter = 0
	}
	if rec.Fault == Slow {
		rec.Delay = p.delay
	}
	if match && p.seatHold > 0 && rec.Fault == NoFault {
		rec.Seated, rec.Delay = true, p.seatHold
	}
	p.log = append(p.log, rec)
	if !isWatch(r) {
		p.inFlight[len(p.log)-1] = true
	}
	return len(p.log) - 1, rec
}

// choose picks the fault for r; the caller holds p.mu.
func (p *FaultProxy) choose(r *http.Request) (Fault, time.Duration) {
	if p.decide != nil {
		if f, retryAfter, ok := p.decide(r); ok {
			if retryAfter <= 0 {
				retryAfter = p.retryAfter
			}
			return f, retryAfter.Round(time.Second)
		}
	}
	if p.failAll != NoFault {
		return p.failAll, p.retryAfter
	}
	return p.draw(), p.retryAfter
}

// draw picks a fault with the configured rates; the caller holds p.mu.
func (p *FaultProxy) draw() Fault {
	u := p.rng.Float64()
	for _, f := range Faults {
		if u < p.rates[f] {
			return f
		}
		u -= p.rates[f]
	}
	return NoFault
}

func (p *FaultProxy) end(i int, forwarded bool, status int, abandoned bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log[i].Forwarded, p.log[i].Status, p.log[i].Abandoned = forwarded, status, abandoned
	p.log[i].Duration = time.Since(p.log[i].Time)
	delete(p.inFlight, i)
}

func (p *FaultProxy) serve(w http.ResponseWriter, r *http.Request) {
	i, rec := p.begin(r)
	switch rec.Fault {
	case Reset:
		reset(w)
		p.end(i, false, 0, false)
	case InternalError, Unavailable, Throttle:
		p.end(i, false, refuse(w, rec.Fault, rec.RetryAfter), false)
	case Stall, Truncate:
		status, hangUp := p.breakAnswer(w, r, rec.Fault)
		// The record is complete once the broken answer is out; a stalled
		// one may hold the connection for as long as the client waits.
		p.end(i, true, status, false)
		hangUp()
	default:
		if rec.Seated {
			if !await(p, i, r, p.seat) {
				return
			}
			defer func() { p.seat <- struct{}{} }()
		}
		if (rec.Fault == Slow || rec.Seated) && !await(p, i, r, time.After(rec.Delay)) {
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			// ReverseProxy aborts the handler (panics with
			// http.ErrAbortHandler) when the answer cannot be copied to a
			// client that hung up in the middle of it: the record ends all
			// the same, or WaitIdle would wait for it forever.
			if v := recover(); v != nil {
				p.end(i, true, sw.status, !isWatch(r))
				panic(v)
			}
		}()
		p.forward.ServeHTTP(sw, r)
		// net/http cancels the request's context when the client hangs up;
		// a watch is a stream that its client closes by design.
		p.end(i, true, sw.status, r.Context().Err() != nil && !isWatch(r))
	}
}

// await waits for ready, and reports whether it came before the client
// gave up or the proxy stopped; if not, the request's record is ended.
func await[T any](p *FaultProxy, i int, r *http.Request, ready <-chan T) bool {
	select {
	case <-ready:
		return true
	case <-r.Context().Done():
		p.end(i, false, 0, true)
	case <-p.stop:
		p.end(i, false, 0, false)
	}
	return false
}

// reset closes the client's connection with a TCP reset rather than an
// orderly close, as a crashed peer or a dropped NAT entry would.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// refuse answers as kube-apiserver does when it refuses a request: a
// Status, with details.retryAfterSeconds next to the header for a 429.
func refuse(w http.ResponseWriter, f Fault, retryAfter time.Duration) int {
	code, _ := strconv.Atoi(string(f))
	status := &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: statusReasons[code],
		Message: "injected by the fault proxy",
	}
	if f == Throttle {
		seconds := int32(retryAfter / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(int(seconds)))
		status.Details = &metav1.StatusDetails{RetryAfterSeconds: seconds}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(status)
	return code
}

// breakAnswer forwards r, then sends the client the answer's status,
// headers (with the full Content-Length) and half its body, and returns
// the status and a function that ends the connection: at once for
// Truncate, once the client gives up for Stall. The connection is taken
// over from net/http, which would otherwise complete or correct the answer.
func (p *FaultProxy) breakAnswer(w http.ResponseWriter, r *http.Request, f Fault) (int, func()) {
	answer := httptest.NewRecorder()
	p.forward.ServeHTTP(answer, r)
	resp := answer.Result()
	body := answer.Body.Bytes()
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return 0, func() {}
	}
	header := resp.Header.Clone()
	for _, h := range []string{"Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive"} {
		header.Del(h)
	}
	// An empty body still promises a byte, so the client waits for it.
	header.Set("Content-Length", strconv.Itoa(max(len(body), 1)))
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", resp.StatusCode, http.StatusText(resp.StatusCode))
	_ = header.Write(buf)
	_, _ = buf.WriteString("\r\n")
	_, _ = buf.Write(body[:len(body)/2])
	if err := buf.Flush(); err != nil || f == Truncate {
		return resp.StatusCode, func() { _ = conn.Close() }
	}
	return resp.StatusCode, func() {
		defer conn.Close()
		// The client closing its end ends the read.
		gone := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, buf.Reader)
			close(gone)
		}()
		select {
		case <-gone:
		case <-p.stop:
		case <-time.After(p.maxStall):
		}
	}
}

// statusWriter remembers the status code of a forwarded answer; Unwrap
// lets the reverse proxy flush streamed answers (watches) through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
