package framework

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// Resource is a two-version custom resource like Widgets, under a group,
// plural and kind of the test's choosing, so that scenarios sharing one
// control plane never touch each other's objects, and the API server's
// request counts (which name the plural only) tell them apart.
type Resource struct {
	Group, Plural, Kind string
}

// GVR is the resource in version ("v1" or "v2").
func (r Resource) GVR(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: version, Resource: r.Plural}
}

// CRDName is the name of the resource's CRD.
func (r Resource) CRDName() string { return r.Plural + "." + r.Group }

// EtcdPrefix is where the API server keeps the resource's objects.
func (r Resource) EtcdPrefix() string { return EtcdPrefix(r.GVR("v1").GroupResource()) }

// Object is object number i of the resource, named name, in version, with
// the distinct content of Widget.
func (r Resource) Object(version, name string, i int) *unstructured.Unstructured {
	obj := Widget(version, name, i)
	obj.SetAPIVersion(r.Group + "/" + version)
	obj.SetKind(r.Kind)
	return obj
}

// CreateResource creates r's CRD, served in v1 and v2 with v1 stored, and
// waits until it is served.
func (e *Env) CreateResource(t testing.TB, r Resource) {
	t.Helper()
	e.createCRD(t, r, "v1")
}

// CreateObjects creates n objects of r in v1, named obj-00000 on, spread
// over namespaces (created if missing).
func (e *Env) CreateObjects(t testing.TB, r Resource, namespaces []string, n int) {
	t.Helper()
	ctx := Context(t, 5*time.Minute)
	for _, ns := range namespaces {
		e.CreateNamespace(t, ns)
	}
	for i := range n {
		ns := namespaces[i%len(namespaces)]
		if _, err := e.Dynamic.Resource(r.GVR("v1")).Namespace(ns).Create(ctx, r.Object("v1", fmt.Sprintf("obj-%05d", i), i), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %d: %v", r.Kind, i, err)
		}
	}
}

// FlipStorage makes v2 the storage version of r and waits until discovery
// says so, so that every object created before needs a migration.
func (e *Env) FlipStorage(t testing.TB, r Resource) {
	t.Helper()
	hash := e.StorageVersionHash(t, r.GVR("v1"))
	e.SetCRDStorageVersion(t, r.CRDName(), "v2")
	e.WaitStorageVersionHashChange(t, r.GVR("v1"), hash)
}

// ModRevisions is the etcd revision at which every key under prefix was
// last written: what changes if and only if etcd stored a new value.
func (e *Env) ModRevisions(t testing.TB, prefix string) map[string]int64 {
	t.Helper()
	resp, err := e.Etcd.Get(Context(t, time.Minute), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("read etcd %s: %v", prefix, err)
	}
	out := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.ModRevision
	}
	return out
}

// ServerMetric sums the API server's own samples of the counter or gauge
// name whose labels contain every one of labels (written as `key="value"`).
func (e *Env) ServerMetric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	raw, err := e.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(Context(t, time.Minute))
	if err != nil {
		t.Fatalf("read API server metrics: %v", err)
	}
	total := 0.0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
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
