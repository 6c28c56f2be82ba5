package etcdscan

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
)

// kmsV2Value is a value as kube-apiserver writes it through the KMS v2
// provider named provider, sealed under keyID: the prefix, then the
// EncryptedObject's fields in the order proto.Marshal writes them
// (encryptedData 1, keyID 2, encryptedDEKSource 3, encryptedDEKSourceType 5).
func kmsV2Value(provider, keyID string) string {
	b := []byte("k8s:enc:kms:v2:" + provider + ":")
	b = protowire.AppendBytes(protowire.AppendTag(b, 1, protowire.BytesType), []byte("\x8a\x01sealed"))
	b = protowire.AppendString(protowire.AppendTag(b, 2, protowire.BytesType), keyID)
	b = protowire.AppendBytes(protowire.AppendTag(b, 3, protowire.BytesType), []byte("dek-source"))
	b = protowire.AppendVarint(protowire.AppendTag(b, 5, protowire.VarintType), 1)
	return string(b)
}

func TestParseFailOnKey(t *testing.T) {
	tests := []struct {
		arg     string
		want    FailOnKey
		shown   string
		wantErr string
	}{
		{arg: "key1", want: FailOnKey{Name: "key1"}, shown: "key1"},
		{arg: "kms:v2:vault", want: FailOnKey{Name: "vault", KMSv2: true}, shown: "kms:v2:vault"},
		{arg: "kms:v2:vault:transit-3", want: FailOnKey{Name: "vault", KMSv2: true, KeyID: "transit-3"}, shown: "kms:v2:vault:transit-3"},
		{arg: "kms:v2:aws:arn:aws:kms:eu-west-1:111122223333:key/1234abcd", want: FailOnKey{Name: "aws", KMSv2: true, KeyID: "arn:aws:kms:eu-west-1:111122223333:key/1234abcd"},
			shown: "kms:v2:aws:arn:aws:kms:eu-west-1:111122223333:key/1234abcd"},
		{arg: `kms:v2:vault:"key 2"`, want: FailOnKey{Name: "vault", KMSv2: true, KeyID: "key 2"}, shown: `kms:v2:vault:"key 2"`},
		{arg: `kms:v2:vault:"plain"`, want: FailOnKey{Name: "vault", KMSv2: true, KeyID: "plain"}, shown: "kms:v2:vault:plain"},
		{arg: "kms:v2:vault:key 2", want: FailOnKey{Name: "vault", KMSv2: true, KeyID: "key 2"}, shown: `kms:v2:vault:"key 2"`},

		{arg: "", wantErr: `--fail-on-key "": want the name of a key in the encryption configuration (for KMS, the provider's name), a KMS v2 key ID without colons, or kms:v2:PROVIDER:KEYID`},
		{arg: "aescbc:v1:key1", wantErr: `--fail-on-key "aescbc:v1:key1": want the name of a key`},
		{arg: "arn:aws:kms:x:1:key/old", wantErr: `--fail-on-key "arn:aws:kms:x:1:key/old": want the name of a key`},
		{arg: "kms:v1:vault", wantErr: `--fail-on-key "kms:v1:vault": want the name of a key`},
		{arg: "kms:v2:", wantErr: `--fail-on-key "kms:v2:": want kms:v2:PROVIDER:KEYID, or kms:v2:PROVIDER for every key ID of the provider`},
		{arg: "kms:v2::key", wantErr: `--fail-on-key "kms:v2::key": want kms:v2:PROVIDER:KEYID`},
		{arg: "kms:v2:vault:", wantErr: `--fail-on-key "kms:v2:vault:": the key ID is empty, and kube-apiserver writes none; kms:v2:vault alone names every key ID`},
		{arg: `kms:v2:vault:""`, wantErr: `--fail-on-key "kms:v2:vault:\"\"": the key ID is empty`},
		{arg: `kms:v2:vault:"open`, wantErr: `--fail-on-key "kms:v2:vault:\"open": "open is not a key ID quoted as svm prints it`},
		{arg: "kms:v2:vault:" + strings.Repeat("k", 1025), wantErr: `--fail-on-key "kms:v2:vault:kkk`},
		{arg: `kms:v2:vault:"\xff"`, wantErr: `--fail-on-key "kms:v2:vault:\"\\xff\"": kube-apiserver writes no such key ID (UTF-8, at most 1024 bytes)`},
	}
	for _, tt := range tests {
		got, err := ParseFailOnKey(tt.arg)
		if tt.wantErr != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Errorf("ParseFailOnKey(%q) = %+v, %v; want error %q", tt.arg, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want || got.String() != tt.shown {
			t.Errorf("ParseFailOnKey(%q) = %+v (%s), %v; want %+v (%s)", tt.arg, got, got, err, tt.want, tt.shown)
		}
	}
}

// TestScanKMSv2KeyIDs scans values sealed the way kube-apiserver seals
// them under two key IDs of one KMS v2 provider, counts them apart, and
// gates on each key ID as `svm etcd-scan --fail-on-key` does.
func TestScanKMSv2KeyIDs(t *testing.T) {
	old, current := "arn:aws:kms:eu-west-1:111122223333:key/old", "arn:aws:kms:eu-west-1:111122223333:key/new"
	etcd := &fakeEtcd{revision: 7, kvs: map[string]string{
		"/registry/secrets/a/s1":    kmsV2Value("aws", old),
		"/registry/secrets/a/s2":    kmsV2Value("aws", current),
		"/registry/secrets/a/s3":    kmsV2Value("aws", current),
		"/registry/secrets/b/s4":    kmsV2Value("aws", "key \"4\""),
		"/registry/configmaps/a/c1": kmsV2Value("aws", current),
	}}
	r, err := Scanner{Endpoints: []string{"http://127.0.0.1:2379"}, PageSize: 2, Timeout: time.Minute}.Scan(t.Context(), etcd, []string{"/registry/"})
	if err != nil {
		t.Fatal(err)
	}
	kms := func(resource, keyID string, n int64) Count {
		return Count{Resource: resource, Encryption: "kms:v2:aws", Provider: "kms", Key: "aws", KeyID: keyID, Values: n}
	}
	want := []Count{kms("configmaps", current, 1), kms("secrets", current, 2), kms("secrets", old, 1), kms("secrets", "key \"4\"", 1)} // by key ID
	if diff := cmp.Diff(want, r.Counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		arg  string
		want Verdict
	}{
		{arg: "kms:v2:aws:" + old, want: Unsafe},
		{arg: "kms:v2:aws:" + current, want: Unsafe},
		{arg: `kms:v2:aws:"key \"4\""`, want: Unsafe},
		{arg: "kms:v2:aws", want: Unsafe},
		{arg: "aws", want: Unsafe},
		{arg: "kms:v2:aws:arn:aws:kms:eu-west-1:111122223333:key/older", want: Passed},
		{arg: "kms:v2:gcp:" + old, want: Passed},
		{arg: "key-4", want: Passed},
	} {
		k, err := ParseFailOnKey(tt.arg)
		if err != nil {
			t.Fatal(err)
		}
		if got, lines := Check(r, []FailOnKey{k}, false); got != tt.want {
			t.Errorf("--fail-on-key %s: verdict %d, want %d (%q)", tt.arg, got, tt.want, lines)
		}
	}
}
