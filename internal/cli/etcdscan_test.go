package cli

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/svm-project/svm/internal/document"
	"github.com/svm-project/svm/test/golden"
)

func TestEtcdScanFlags(t *testing.T) {
	valid := func(o *EtcdScanOptions) {}
	tests := []struct {
		name         string
		set          func(*EtcdScanOptions)
		wantPrefixes []string
		wantErr      string
	}{
		{name: "defaults", set: valid, wantPrefixes: []string{"/registry/"}},
		{name: "https with TLS", set: func(o *EtcdScanOptions) {
			o.Endpoints = "https://10.0.0.1:2379, https://10.0.0.2:2379"
			o.CACert, o.Cert, o.Key = "ca.crt", "client.crt", "client.key"
		}, wantPrefixes: []string{"/registry/"}},
		{name: "https with the system's CAs", set: func(o *EtcdScanOptions) { o.Endpoints = "https://etcd.example.com:2379" }, wantPrefixes: []string{"/registry/"}},
		{name: "resources, sorted and once each", set: func(o *EtcdScanOptions) {
			o.Resources = []string{"secrets", "widgets.example.com", "configmaps", "secrets"}
		}, wantPrefixes: []string{"/registry/configmaps/", "/registry/example.com/widgets/", "/registry/secrets/"}},
		{name: "a resource within a prefix", set: func(o *EtcdScanOptions) {
			o.Prefix, o.Resources = "/registry/example.com/", []string{"widgets.example.com"}
		}, wantPrefixes: []string{"/registry/example.com/widgets/"}},
		{name: "a prefix within a resource: one namespace's secrets", set: func(o *EtcdScanOptions) {
			o.Prefix, o.Resources = "/registry/secrets/team-a/", []string{"secrets"}
		}, wantPrefixes: []string{"/registry/secrets/team-a/"}},

		{name: "no endpoint", set: func(o *EtcdScanOptions) { o.Endpoints = " , " }, wantErr: "--endpoints must name at least one etcd client URL"},
		{name: "endpoint without a scheme", set: func(o *EtcdScanOptions) { o.Endpoints = "10.0.0.1:2379" }, wantErr: `--endpoints: "10.0.0.1:2379" is not an etcd client URL like https://10.0.0.1:2379`},
		{name: "endpoint with a path", set: func(o *EtcdScanOptions) { o.Endpoints = "http://10.0.0.1:2379/v3" }, wantErr: `--endpoints: "http://10.0.0.1:2379/v3" is not an etcd client URL`},
		{name: "mixed schemes", set: func(o *EtcdScanOptions) { o.Endpoints = "http://a:2379,https://b:2379" }, wantErr: "--endpoints mixes http:// and https://"},
		{name: "cert without key", set: func(o *EtcdScanOptions) { o.Endpoints, o.Cert = "https://a:2379", "client.crt" }, wantErr: "--cert and --key go together: give both or neither"},
		{name: "key without cert", set: func(o *EtcdScanOptions) { o.Endpoints, o.Key = "https://a:2379", "client.key" }, wantErr: "--cert and --key go together: give both or neither"},
		{name: "TLS to http", set: func(o *EtcdScanOptions) { o.CACert = "ca.crt" }, wantErr: "--cacert, --cert and --key are for https:// endpoints"},
		{name: "prefix outside /registry/", set: func(o *EtcdScanOptions) { o.Prefix = "/other" }, wantErr: `--prefix "/other": etcd-scan reads only what kube-apiserver stores, under /registry/`},
		{name: "/registry without its slash", set: func(o *EtcdScanOptions) { o.Prefix = "/registry" }, wantErr: `--prefix "/registry": etcd-scan reads only`},
		{name: "a built-in group named", set: func(o *EtcdScanOptions) { o.Resources = []string{"deployments.apps"} }, wantErr: `--resource: resource "deployments.apps": kube-apiserver stores the built-in resources of every group under /registry/<resource>/; name it "deployments"`},
		{name: "a resource outside the prefix", set: func(o *EtcdScanOptions) {
			o.Prefix, o.Resources = "/registry/secrets/", []string{"configmaps"}
		}, wantErr: "--resource configmaps: its keys, under /registry/configmaps/, are outside --prefix /registry/secrets/"},
		{name: "bad output", set: func(o *EtcdScanOptions) { o.Output = "yaml" }, wantErr: `--output must be one of table, json, got "yaml"`},
		{name: "no time", set: func(o *EtcdScanOptions) { o.Timeout = 0 }, wantErr: "--timeout must be positive, got 0s"},
		{name: "no page", set: func(o *EtcdScanOptions) { o.PageSize = 0 }, wantErr: "--page-size must be at least 1, got 0"},
		{name: "empty key name", set: func(o *EtcdScanOptions) { o.FailOnKeys = []string{""} }, wantErr: `--fail-on-key "": want the name of a key`},
		{name: "a label for a key name", set: func(o *EtcdScanOptions) { o.FailOnKeys = []string{"aescbc:v1:key1"} }, wantErr: `--fail-on-key "aescbc:v1:key1": want the name of a key`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &EtcdScanOptions{Endpoints: "http://127.0.0.1:2379", Prefix: "/registry/", Output: "table", Timeout: time.Minute, PageSize: 500}
			tt.set(o)
			err := o.Complete()
			if err == nil {
				err = o.Validate()
			}
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want prefix %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantPrefixes, o.prefixes); diff != "" {
				t.Errorf("prefixes (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeEtcd serves ranges of a fixed set of keys and records every request,
// so that a test can see how etcd-scan pages and pins its revision.
type fakeEtcd struct {
	kvs      map[string]string
	revision int64
	ops      []clientv3.Op
}

func (f *fakeEtcd) Get(_ context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	op := clientv3.OpGet(key, opts...)
	f.ops = append(f.ops, op)
	var keys []string
	for k := range f.kvs {
		if k >= key && k < string(op.RangeBytes()) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	resp := &clientv3.GetResponse{Header: &pb.ResponseHeader{Revision: f.revision}}
	if limit := int(op.Limit()); limit > 0 && len(keys) > limit {
		keys, resp.More = keys[:limit], true
	}
	for _, k := range keys {
		resp.Kvs = append(resp.Kvs, &mvccpb.KeyValue{Key: []byte(k), Value: []byte(f.kvs[k])})
	}
	f.revision++ // the API server writes on between pages
	return resp, nil
}

func TestEtcdScanPages(t *testing.T) {
	key1 := "k8s:enc:aescbc:v1:key1:\x00ciphertext"
	etcd := &fakeEtcd{revision: 100, kvs: map[string]string{
		"/registry/configmaps/a/c1":   `{"kind":"ConfigMap"}`,
		"/registry/secrets/a/s1":      key1,
		"/registry/secrets/a/s2":      key1,
		"/registry/secrets/a/s3":      key1,
		"/registry/secrets/b/s4":      key1,
		"/registry/secrets/b/s5":      key1,
		"/registry/secretsandmore/x":  key1, // outside the secrets' prefix
		"/registry/example.com/w/a/1": `{"kind":"Widget"}`,
	}}
	o := &EtcdScanOptions{Endpoints: "http://127.0.0.1:2379", Prefix: "/registry/", Resources: []string{"secrets", "configmaps", "pods"}, Output: "table", Timeout: time.Minute, PageSize: 2}
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	r, err := o.scan(t.Context(), etcd)
	if err != nil {
		t.Fatal(err)
	}
	want := &EtcdScanReport{
		Version:  EtcdScanVersion,
		Revision: 100,
		Prefixes: []EtcdScanPrefix{{Prefix: "/registry/configmaps/", Values: 1}, {Prefix: "/registry/pods/", Values: 0}, {Prefix: "/registry/secrets/", Values: 5}},
		Counts: []EtcdScanCount{
			{Resource: "configmaps", Encryption: "identity", Values: 1},
			{Resource: "secrets", Encryption: "aescbc:v1:key1", Provider: "aescbc", Key: "key1", Values: 5},
		},
		Total: 6,
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	// Every request reads (the fake has nothing else), each page from the
	// key after the last, all of them at the first page's revision.
	type request struct {
		Key, End   string
		Rev, Limit int64
	}
	var got []request
	for _, op := range etcd.ops {
		got = append(got, request{Key: string(op.KeyBytes()), End: string(op.RangeBytes()), Rev: op.Rev(), Limit: op.Limit()})
	}
	wantRequests := []request{
		{Key: "/registry/configmaps/", End: "/registry/configmaps0", Rev: 0, Limit: 2},
		{Key: "/registry/pods/", End: "/registry/pods0", Rev: 100, Limit: 2},
		{Key: "/registry/secrets/", End: "/registry/secrets0", Rev: 100, Limit: 2},
		{Key: "/registry/secrets/a/s2\x00", End: "/registry/secrets0", Rev: 100, Limit: 2},
		{Key: "/registry/secrets/b/s4\x00", End: "/registry/secrets0", Rev: 100, Limit: 2},
	}
	if diff := cmp.Diff(wantRequests, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestEtcdScanVerdict(t *testing.T) {
	report := func(counts ...EtcdScanCount) *EtcdScanReport {
		r := &EtcdScanReport{Prefixes: []EtcdScanPrefix{{Prefix: "/registry/secrets/", Values: 1}}, Counts: counts}
		return r
	}
	key1 := EtcdScanCount{Resource: "secrets", Encryption: "aescbc:v1:key1", Provider: "aescbc", Key: "key1", Values: 60}
	key1Widgets := EtcdScanCount{Resource: "widgets.example.com", Encryption: "aesgcm:v1:key1", Provider: "aesgcm", Key: "key1", Values: 1}
	key2 := EtcdScanCount{Resource: "secrets", Encryption: "aescbc:v1:key2", Provider: "aescbc", Key: "key2", Values: 60}
	plain := EtcdScanCount{Resource: "configmaps", Encryption: "identity", Values: 5}
	unrecognised := EtcdScanCount{Resource: "secrets", Encryption: "unrecognised", Values: 2}
	tests := []struct {
		name           string
		r              *EtcdScanReport
		failOnKeys     []string
		failOnIdentity bool
		wantCode       int
		wantLines      []string
	}{
		{name: "no checks", r: report(key1, plain, unrecognised)},
		{name: "no checks, an empty prefix is noted", r: &EtcdScanReport{Prefixes: []EtcdScanPrefix{{Prefix: "/registry/secret/"}}},
			wantLines: []string{"note: nothing is stored under /registry/secret/"}},
		{name: "old key gone", r: report(key2, plain), failOnKeys: []string{"key1"}},
		{name: "old key still used, by two providers", r: report(key1, key2, key1Widgets), failOnKeys: []string{"key1"}, wantCode: ExitUnsafe,
			wantLines: []string{"svm: --fail-on-key key1: 61 values are still encrypted under key key1 (secrets 60, widgets.example.com 1)"}},
		{name: "plain text", r: report(key2, plain), failOnIdentity: true, wantCode: ExitUnsafe,
			wantLines: []string{"svm: --fail-on-identity: 5 values are not encrypted (configmaps 5)"}},
		{name: "unrecognised values may need the key", r: report(key2, unrecognised), failOnKeys: []string{"key1"}, wantCode: ExitUnknown,
			wantLines: []string{"svm: cannot vouch for the --fail-on-* checks: 2 values are unrecognised (secrets 2) and may need any key"}},
		{name: "a failed check wins over unrecognised values", r: report(key1, unrecognised), failOnKeys: []string{"key1", "key2"}, wantCode: ExitUnsafe,
			wantLines: []string{
				"svm: --fail-on-key key1: 60 values are still encrypted under key key1 (secrets 60)",
				"svm: cannot vouch for the --fail-on-* checks: 2 values are unrecognised (secrets 2) and may need any key",
			}},
		{name: "a misspelt resource proves nothing", r: &EtcdScanReport{Prefixes: []EtcdScanPrefix{{Prefix: "/registry/secret/"}}}, failOnKeys: []string{"key1"}, wantCode: ExitUnknown,
			wantLines: []string{"svm: cannot vouch for the --fail-on-* checks: nothing is stored under /registry/secret/; is the resource or the prefix misspelt?"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, lines := etcdScanVerdict(tt.r, tt.failOnKeys, tt.failOnIdentity)
			if code != tt.wantCode {
				t.Errorf("code %d, want %d", code, tt.wantCode)
			}
			if diff := cmp.Diff(tt.wantLines, lines); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteEtcdScan(t *testing.T) {
	r := &EtcdScanReport{
		Version:  EtcdScanVersion,
		Revision: 812,
		Prefixes: []EtcdScanPrefix{{Prefix: "/registry/configmaps/", Values: 5}, {Prefix: "/registry/secrets/", Values: 61}},
		Counts: []EtcdScanCount{
			{Resource: "configmaps", Encryption: "identity", Values: 5},
			{Resource: "secrets", Encryption: "aescbc:v1:key1", Provider: "aescbc", Key: "key1", Values: 60},
			{Resource: "secrets", Encryption: "unrecognised", Values: 1},
		},
		Total: 66,
	}
	var table bytes.Buffer
	if err := writeEtcdScanTable(&table, r); err != nil {
		t.Fatal(err)
	}
	wantTable := "" +
		"RESOURCE     ENCRYPTION       VALUES\n" +
		"configmaps   identity         5\n" +
		"secrets      aescbc:v1:key1   60\n" +
		"secrets      unrecognised     1\n" +
		"etcd revision 812: 66 values under /registry/configmaps/, /registry/secrets/\n"
	if diff := cmp.Diff(wantTable, table.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}

	table.Reset()
	if err := writeEtcdScanTable(&table, &EtcdScanReport{Revision: 9, Prefixes: []EtcdScanPrefix{{Prefix: "/registry/secret/"}}}); err != nil {
		t.Fatal(err)
	}
	if want := "etcd revision 9: 0 values under /registry/secret/\n"; table.String() != want {
		t.Errorf("empty table %q, want %q", table.String(), want)
	}

	// The JSON document reads back into the same report, field for field.
	var doc bytes.Buffer
	if err := document.WriteJSON(&doc, r); err != nil {
		t.Fatal(err)
	}
	golden.DecodesJSON(t, doc.Bytes(), r)
}
