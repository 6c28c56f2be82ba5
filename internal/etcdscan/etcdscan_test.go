package etcdscan

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/svm-project/svm/internal/document"
	"github.com/svm-project/svm/test/golden"
)

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

func TestScanPages(t *testing.T) {
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
	prefixes, err := Prefixes("/registry/", []string{"secrets", "configmaps", "pods"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Scanner{Endpoints: []string{"http://127.0.0.1:2379"}, PageSize: 2, Timeout: time.Minute}.Scan(t.Context(), etcd, prefixes)
	if err != nil {
		t.Fatal(err)
	}
	want := &Report{
		Version:  Version,
		Revision: 100,
		Prefixes: []Prefix{{Prefix: "/registry/configmaps/", Values: 1}, {Prefix: "/registry/pods/", Values: 0}, {Prefix: "/registry/secrets/", Values: 5}},
		Counts: []Count{
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

func TestCheck(t *testing.T) {
	report := func(counts ...Count) *Report {
		r := &Report{Prefixes: []Prefix{{Prefix: "/registry/secrets/", Values: 1}}, Counts: counts}
		return r
	}
	key1 := Count{Resource: "secrets", Encryption: "aescbc:v1:key1", Provider: "aescbc", Key: "key1", Values: 60}
	key1Widgets := Count{Resource: "widgets.example.com", Encryption: "aesgcm:v1:key1", Provider: "aesgcm", Key: "key1", Values: 1}
	key2 := Count{Resource: "secrets", Encryption: "aescbc:v1:key2", Provider: "aescbc", Key: "key2", Values: 60}
	plain := Count{Resource: "configmaps", Encryption: "identity", Values: 5}
	unrecognised := Count{Resource: "secrets", Encryption: "unrecognised", Values: 2}
	kmsOld := Count{Resource: "secrets", Encryption: "kms:v2:vault", Provider: "kms", Key: "vault", KeyID: "arn:aws:kms:x:1:key/old", Values: 7}
	kmsNew := Count{Resource: "secrets", Encryption: "kms:v2:vault", Provider: "kms", Key: "vault", KeyID: "arn:aws:kms:x:1:key/new", Values: 53}
	kmsNewWidgets := Count{Resource: "widgets.example.com", Encryption: "kms:v2:vault", Provider: "kms", Key: "vault", KeyID: "arn:aws:kms:x:1:key/new", Values: 2}
	kmsOther := Count{Resource: "secrets", Encryption: "kms:v2:gcp", Provider: "kms", Key: "gcp", KeyID: "arn:aws:kms:x:1:key/old", Values: 4}
	kmsPlainID := Count{Resource: "secrets", Encryption: "kms:v2:vault", Provider: "kms", Key: "vault", KeyID: "transit-3", Values: 1}
	kmsOddID := Count{Resource: "secrets", Encryption: "kms:v2:vault", Provider: "kms", Key: "vault", KeyID: "key \"3\"\n", Values: 1}
	tests := []struct {
		name           string
		r              *Report
		failOnKeys     []string
		failOnIdentity bool
		wantVerdict    Verdict
		wantLines      []string
	}{
		{name: "no checks", r: report(key1, plain, unrecognised)},
		{name: "no checks, an empty prefix is noted", r: &Report{Prefixes: []Prefix{{Prefix: "/registry/secret/"}}},
			wantLines: []string{"note: nothing is stored under /registry/secret/"}},
		{name: "old key gone", r: report(key2, plain), failOnKeys: []string{"key1"}},
		{name: "old key still used, by two providers", r: report(key1, key2, key1Widgets), failOnKeys: []string{"key1"}, wantVerdict: Unsafe,
			wantLines: []string{"svm: --fail-on-key key1: 61 values are still encrypted under key key1 (secrets 60, widgets.example.com 1)"}},
		{name: "plain text", r: report(key2, plain), failOnIdentity: true, wantVerdict: Unsafe,
			wantLines: []string{"svm: --fail-on-identity: 5 values are not encrypted (configmaps 5)"}},
		{name: "unrecognised values may need the key", r: report(key2, unrecognised), failOnKeys: []string{"key1"}, wantVerdict: Unknown,
			wantLines: []string{"svm: cannot vouch for the --fail-on-* checks: 2 values are unrecognised (secrets 2) and may need any key"}},
		{name: "a failed check wins over unrecognised values", r: report(key1, unrecognised), failOnKeys: []string{"key1", "key2"}, wantVerdict: Unsafe,
			wantLines: []string{
				"svm: --fail-on-key key1: 60 values are still encrypted under key key1 (secrets 60)",
				"svm: cannot vouch for the --fail-on-* checks: 2 values are unrecognised (secrets 2) and may need any key",
			}},
		{name: "a misspelt resource proves nothing", r: &Report{Prefixes: []Prefix{{Prefix: "/registry/secret/"}}}, failOnKeys: []string{"key1"}, wantVerdict: Unknown,
			wantLines: []string{"svm: cannot vouch for the --fail-on-* checks: nothing is stored under /registry/secret/; is the resource or the prefix misspelt?"}},

		{name: "kms v2: the old key ID gone", r: report(kmsNew, kmsNewWidgets, plain), failOnKeys: []string{"kms:v2:vault:arn:aws:kms:x:1:key/old"}},
		{name: "kms v2: the old key ID still used, the same key ID of another provider apart",
			r: report(kmsOld, kmsNew, kmsOther), failOnKeys: []string{"kms:v2:vault:arn:aws:kms:x:1:key/old"}, wantVerdict: Unsafe,
			wantLines: []string{"svm: --fail-on-key kms:v2:vault:arn:aws:kms:x:1:key/old: 7 values are still encrypted under key ID arn:aws:kms:x:1:key/old of KMS v2 provider vault (secrets 7)"}},
		{name: "kms v2: a key ID in two resources", r: report(kmsOld, kmsNew, kmsNewWidgets), failOnKeys: []string{"kms:v2:vault:arn:aws:kms:x:1:key/new"}, wantVerdict: Unsafe,
			wantLines: []string{"svm: --fail-on-key kms:v2:vault:arn:aws:kms:x:1:key/new: 55 values are still encrypted under key ID arn:aws:kms:x:1:key/new of KMS v2 provider vault (secrets 53, widgets.example.com 2)"}},
		{name: "kms v2: a key ID quoted as the table shows it", r: report(kmsOddID, kmsNew), failOnKeys: []string{`kms:v2:vault:"key \"3\"\n"`}, wantVerdict: Unsafe,
			wantLines: []string{`svm: --fail-on-key kms:v2:vault:"key \"3\"\n": 1 value is still encrypted under key ID "key \"3\"\n" of KMS v2 provider vault (secrets 1)`}},
		{name: "kms v2: a provider, every key ID", r: report(kmsOld, kmsNew, kmsOther), failOnKeys: []string{"kms:v2:vault"}, wantVerdict: Unsafe,
			wantLines: []string{"svm: --fail-on-key kms:v2:vault: 60 values are still encrypted by KMS v2 provider vault (secrets 60)"}},
		{name: "kms v2: a provider's name, as before", r: report(kmsOld, kmsNew, kmsOther), failOnKeys: []string{"gcp"}, wantVerdict: Unsafe,
			wantLines: []string{"svm: --fail-on-key gcp: 4 values are still encrypted under key gcp (secrets 4)"}},
		{name: "kms v2: a key ID without colons, plain", r: report(kmsPlainID, kmsNew), failOnKeys: []string{"transit-3"}, wantVerdict: Unsafe,
			wantLines: []string{"svm: --fail-on-key transit-3: 1 value is still encrypted under key transit-3 (secrets 1)"}},
		{name: "kms v2: a key ID without colons, gone", r: report(kmsNew, key1), failOnKeys: []string{"transit-3"}},
		{name: "kms v2: unrecognised values may be under the key ID", r: report(kmsNew, unrecognised), failOnKeys: []string{"kms:v2:vault:arn:aws:kms:x:1:key/old"}, wantVerdict: Unknown,
			wantLines: []string{"svm: cannot vouch for the --fail-on-* checks: 2 values are unrecognised (secrets 2) and may need any key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var failOnKeys []FailOnKey
			for _, arg := range tt.failOnKeys {
				k, err := ParseFailOnKey(arg)
				if err != nil {
					t.Fatal(err)
				}
				failOnKeys = append(failOnKeys, k)
			}
			verdict, lines := Check(tt.r, failOnKeys, tt.failOnIdentity)
			if verdict != tt.wantVerdict {
				t.Errorf("verdict %d, want %d", verdict, tt.wantVerdict)
			}
			if diff := cmp.Diff(tt.wantLines, lines); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteTable(t *testing.T) {
	r := &Report{
		Version:  Version,
		Revision: 812,
		Prefixes: []Prefix{{Prefix: "/registry/configmaps/", Values: 5}, {Prefix: "/registry/secrets/", Values: 61}},
		Counts: []Count{
			{Resource: "configmaps", Encryption: "identity", Values: 5},
			{Resource: "secrets", Encryption: "aescbc:v1:key1", Provider: "aescbc", Key: "key1", Values: 60},
			{Resource: "secrets", Encryption: "kms:v2:vault", Provider: "kms", Key: "vault", KeyID: "key 2", Values: 3},
			{Resource: "secrets", Encryption: "kms:v2:vault", Provider: "kms", Key: "vault", KeyID: "transit-3", Values: 4},
			{Resource: "secrets", Encryption: "unrecognised", Values: 1},
		},
		Total: 73,
	}
	var table bytes.Buffer
	if err := WriteTable(&table, r); err != nil {
		t.Fatal(err)
	}
	wantTable := "" +
		"RESOURCE     ENCRYPTION               VALUES\n" +
		"configmaps   identity                 5\n" +
		"secrets      aescbc:v1:key1           60\n" +
		"secrets      kms:v2:vault:\"key 2\"     3\n" +
		"secrets      kms:v2:vault:transit-3   4\n" +
		"secrets      unrecognised             1\n" +
		"etcd revision 812: 73 values under /registry/configmaps/, /registry/secrets/\n"
	if diff := cmp.Diff(wantTable, table.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}

	table.Reset()
	if err := WriteTable(&table, &Report{Revision: 9, Prefixes: []Prefix{{Prefix: "/registry/secret/"}}}); err != nil {
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
