package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/svm-project/svm/internal/etcdscan"
)

func TestEtcdScanFlags(t *testing.T) {
	valid := func(o *EtcdScanOptions) {}
	tests := []struct {
		name           string
		set            func(*EtcdScanOptions)
		wantPrefixes   []string
		wantFailOnKeys []etcdscan.FailOnKey
		wantErr        string
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
		{name: "keys: a name, a KMS v2 key ID with colons, quoted as the table shows it", set: func(o *EtcdScanOptions) {
			o.FailOnKeys = []string{"key1", "kms:v2:aws:arn:aws:kms:eu-west-1:111122223333:key/old", `kms:v2:vault:"key 2"`}
		}, wantPrefixes: []string{"/registry/"}, wantFailOnKeys: []etcdscan.FailOnKey{
			{Name: "key1"},
			{Name: "aws", KMSv2: true, KeyID: "arn:aws:kms:eu-west-1:111122223333:key/old"},
			{Name: "vault", KMSv2: true, KeyID: "key 2"},
		}},

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
		{name: "a KMS v2 key ID with colons, without its provider", set: func(o *EtcdScanOptions) { o.FailOnKeys = []string{"arn:aws:kms:x:1:key/old"} },
			wantErr: `--fail-on-key "arn:aws:kms:x:1:key/old": want the name of a key in the encryption configuration (for KMS, the provider's name), a KMS v2 key ID without colons, or kms:v2:PROVIDER:KEYID`},
		{name: "an empty KMS v2 key ID", set: func(o *EtcdScanOptions) { o.FailOnKeys = []string{"kms:v2:vault:"} }, wantErr: `--fail-on-key "kms:v2:vault:": the key ID is empty`},
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
			if diff := cmp.Diff(tt.wantFailOnKeys, o.failOnKeys); diff != "" {
				t.Errorf("--fail-on-key (-want +got):\n%s", diff)
			}
		})
	}
}
