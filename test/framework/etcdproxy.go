package framework

import (
	"bytes"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// EtcdProxy is a TCP proxy between one kube-apiserver and etcd that can
// stall the connections that carry one resource's keys while the others
// flow. kube-apiserver gives every resource's storage an etcd client of
// its own, so a connection that has asked for a key under the prefix
// carries that resource alone: held, the API server keeps serving every
// other resource while it learns nothing new of that one, as a server
// whose watch lags does. (`--etcd-servers-overrides` cannot do this for
// CRDs: kube-apiserver v1.37 builds the apiextensions storage without
// the overrides.)
type EtcdProxy struct {
	// URL is the proxy's etcd client URL, for `--etcd-servers`.
	URL string

	prefix []byte
	mu     sync.Mutex
	cond   *sync.Cond
	held   bool
	// open are the connections in use, closed when the test ends.
	open map[net.Conn]bool
}

// StartEtcdProxy starts a proxy to the etcd at etcdURL (http, as the
// control plane's) that can hold the connections whose requests named a
// key under prefix, for the duration of the test.
func StartEtcdProxy(t testing.TB, etcdURL, prefix string) *EtcdProxy {
	t.Helper()
	if prefix == "" {
		t.Fatal("the etcd proxy needs a key prefix to hold")
	}
	target, err := url.Parse(etcdURL)
	if err != nil {
		t.Fatalf("etcd URL %q: %v", etcdURL, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen for the etcd proxy: %v", err)
	}
	p := &EtcdProxy{URL: "http://" + l.Addr().String(), prefix: []byte(prefix), open: map[net.Conn]bool{}}
	p.cond = sync.NewCond(&p.mu)
	var conns sync.WaitGroup
	t.Cleanup(func() {
		_ = l.Close()
		p.mu.Lock()
		for c := range p.open {
			_ = c.Close()
		}
		p.open = nil
		p.held = false
		p.cond.Broadcast()
		p.mu.Unlock()
		conns.Wait()
	})
	conns.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { p.serve(c, target.Host) })
		}
	})
	return p
}

// Hold stalls, in both directions, every connection that has carried a
// key under the prefix, and every one that carries one from now on,
// until Release. Bytes already forwarded are not taken back.
func (p *EtcdProxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = true
}

// Release lets held connections flow again.
func (p *EtcdProxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = false
	p.cond.Broadcast()
}

// proxiedConn is one client connection and what it has carried.
type proxiedConn struct {
	mu      sync.Mutex
	matched bool
	// tail is the end of what the client sent, in case the prefix
	// straddles two reads.
	tail []byte
}

func (p *EtcdProxy) serve(client net.Conn, target string) {
	defer client.Close()
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer server.Close()
	if !p.track(client, server) {
		return
	}
	defer p.untrack(client, server)
	pc := &proxiedConn{}
	done := make(chan struct{}, 2)
	go func() { p.pump(server, client, pc, true); done <- struct{}{} }()
	go func() { p.pump(client, server, pc, false); done <- struct{}{} }()
	<-done
	// One side ended: end the other, so that neither goroutine outlives it.
	_ = client.Close()
	_ = server.Close()
	<-done
}

// track records open connections, to be closed when the test ends; it
// reports false when it has ended.
func (p *EtcdProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open == nil {
		return false
	}
	for _, c := range conns {
		p.open[c] = true
	}
	return true
}

func (p *EtcdProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.open, c)
	}
}

// pump copies from src to dst, looking for the prefix in what the client
// sends (fromClient), and waits before each write while pc is held.
func (p *EtcdProxy) pump(dst io.Writer, src io.Reader, pc *proxiedConn, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromClient {
				pc.see(buf[:n], p.prefix)
			}
			p.wait(pc)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// see notes whether data, after what came before, holds prefix.
func (pc *proxiedConn) see(data, prefix []byte) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.matched {
		return
	}
	window := append(pc.tail, data...)
	if bytes.Contains(window, prefix) {
		pc.matched = true
		pc.tail = nil
		return
	}
	keep := min(len(window), len(prefix)-1)
	pc.tail = append([]byte(nil), window[len(window)-keep:]...)
}

// wait returns once pc may flow.
func (p *EtcdProxy) wait(pc *proxiedConn) {
	pc.mu.Lock()
	matched := pc.matched
	pc.mu.Unlock()
	if !matched {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.held {
		p.cond.Wait()
	}
}
