// Package etcdscan counts what kube-apiserver stored in etcd, by resource
// and by how each value is stored (encrypted under which provider and key,
// in plain text, or unrecognised), reading etcd directly and never
// writing: the proof an operator reads before dropping an old encryption
// key, which no answer of the API server can give. It is svm etcd-scan's
// engine; the command adds flags, output and exit codes.
//
// A Report holds counts only: no etcd key (which names an object) and,
// of the values, only what their envelope keeps in the clear: the
// provider, the key's name and a KMS v2 value's key ID.
package etcdscan

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/svm-project/svm/internal/etcdvalue"
)

// Version identifies the shape of Report. Fields may be added under the
// same version; a field that is removed, renamed or changes meaning makes
// a new version, so a script can check it before trusting the rest.
const Version = "v1"

// DialTimeout bounds the wait for etcd's first answer: an endpoint that
// is down should fail the command in seconds, not at --timeout.
const DialTimeout = 10 * time.Second

// Report is the document printed by `svm etcd-scan -o json`. It
// holds counts only: no etcd key (which names an object) and, of the
// values, only what their envelope keeps in the clear.
type Report struct {
	// Version is the Version of this structure.
	Version string `json:"version"`
	// Revision is the etcd revision every value was read at: the counts
	// are one consistent snapshot of etcd at that revision.
	Revision int64 `json:"revision"`
	// Prefixes are the key prefixes read, with how many values each holds.
	Prefixes []Prefix `json:"prefixes"`
	// Counts are the values by resource, encryption and KMS v2 key ID,
	// sorted by the three.
	Counts []Count `json:"counts"`
	// Total is the number of values read.
	Total int64 `json:"total"`
}

// Prefix is a key prefix that was read.
type Prefix struct {
	Prefix string `json:"prefix"`
	Values int64  `json:"values"`
}

// Count is how many values of one resource are stored one way.
type Count struct {
	// Resource is the resource as stored: RESOURCE for keys under
	// /registry/<resource>/, RESOURCE.GROUP for keys under
	// /registry/<group>/<resource>/, "<other>" for keys of neither shape.
	Resource string `json:"resource"`
	// Encryption is "<provider>:<version>:<key>" (aescbc:v1:key1,
	// kms:v2:<kms provider name>) for encrypted values, "identity" for
	// values in plain text, "unrecognised" for values that are neither.
	Encryption string `json:"encryption"`
	// Provider and Key are the parts of Encryption that a script gates
	// on, for encrypted values only.
	Provider string `json:"provider,omitempty"`
	Key      string `json:"key,omitempty"`
	// KeyID is, for KMS v2 values only, the key ID of the KMS key they
	// are sealed under, as kube-apiserver wrote it (any characters). The
	// values of one KMS v2 provider are counted apart by key ID, so a
	// resource may have several counts of one Encryption; the table shows
	// them as kms:v2:<provider>:<key ID> (see etcdvalue.QuoteKeyID).
	KeyID  string `json:"keyID,omitempty"`
	Values int64  `json:"values"`
}

// Shown is how the table and the messages name c's encryption:
// Encryption, and for KMS v2 values ":" and the key ID, quoted when it
// holds a character that is not plain (kms:v2:vault:key-2,
// kms:v2:vault:"key 2").
func (c Count) Shown() string {
	if c.KeyID == "" {
		return c.Encryption
	}
	return c.Encryption + ":" + etcdvalue.QuoteKeyID(c.KeyID)
}

// EndpointsSecure checks that every endpoint is an http:// or https://
// URL, all of one kind, and reports whether they are https.
func EndpointsSecure(endpoints []string) (bool, error) {
	var schemes []string
	for _, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return false, fmt.Errorf("--endpoints: %q is not an etcd client URL like https://10.0.0.1:2379", e)
		}
		if !slices.Contains(schemes, u.Scheme) {
			schemes = append(schemes, u.Scheme)
		}
	}
	if len(schemes) > 1 {
		return false, errors.New("--endpoints mixes http:// and https://")
	}
	return schemes[0] == "https", nil
}

// Prefixes are the key prefixes to read: prefix, or, with resources,
// each resource's keys within prefix. Nothing outside RegistryPrefix is
// read: etcd-scan is for what kube-apiserver stored, and has no business
// with anything else an etcd may hold.
func Prefixes(prefix string, resources []string) ([]string, error) {
	if !strings.HasPrefix(prefix, etcdvalue.RegistryPrefix) {
		return nil, fmt.Errorf("--prefix %q: etcd-scan reads only what kube-apiserver stores, under %s", prefix, etcdvalue.RegistryPrefix)
	}
	if len(resources) == 0 {
		return []string{prefix}, nil
	}
	var out []string
	for _, r := range resources {
		rp, err := etcdvalue.ResourcePrefix(r)
		if err != nil {
			return nil, fmt.Errorf("--resource: %w", err)
		}
		switch {
		case strings.HasPrefix(rp, prefix):
		case strings.HasPrefix(prefix, rp):
			rp = prefix // a part of the resource's keys, such as a namespace's
		default:
			return nil, fmt.Errorf("--resource %s: its keys, under %s, are outside --prefix %s", r, rp, prefix)
		}
		if !slices.Contains(out, rp) {
			out = append(out, rp)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Dial connects to etcd at endpoints, with TLS from the PEM files caFile,
// certFile and keyFile for https endpoints (any may be ""). It sends no
// request: an etcd that is not there is found by the first read.
func Dial(endpoints []string, caFile, certFile, keyFile string) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: DialTimeout,
		// The client's own logs would repeat, on every retry, what the
		// one error returned says.
		Logger: zap.NewNop(),
	}
	if secure, _ := EndpointsSecure(endpoints); secure {
		var err error
		if cfg.TLS, err = tlsConfig(caFile, certFile, keyFile); err != nil {
			return nil, err
		}
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to etcd at %s: %w", strings.Join(endpoints, ","), err)
	}
	return client, nil
}

func tlsConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read --cacert: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s holds no PEM certificate", caFile)
		}
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("load --cert and --key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Reader is all that a scan may do to etcd.
type Reader interface {
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
}

// Scanner reads etcd at Endpoints (for its messages), PageSize values per
// request, within Timeout (for its messages; the context bounds it).
type Scanner struct {
	Endpoints []string
	PageSize  int64
	Timeout   time.Duration
}

// Scan reads every prefix page by page, in key order, each page from the
// key after the last one read. Every page after the first is read at the
// first's revision: whatever the API server writes meanwhile, the counts
// are of one moment of etcd, not of a mix of before and after.
func (o Scanner) Scan(ctx context.Context, kv Reader, prefixes []string) (*Report, error) {
	var census etcdvalue.Census
	r := &Report{Version: Version}
	for _, prefix := range prefixes {
		end := clientv3.GetPrefixRangeEnd(prefix)
		var n int64
		for from := prefix; ; {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(o.PageSize), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
			if r.Revision != 0 {
				opts = append(opts, clientv3.WithRev(r.Revision))
			}
			resp, err := o.get(ctx, kv, from, r.Revision == 0, opts)
			if err != nil {
				return nil, err
			}
			if r.Revision == 0 {
				r.Revision = resp.Header.Revision
			}
			for _, v := range resp.Kvs {
				census.Add(string(v.Key), v.Value)
			}
			n += int64(len(resp.Kvs))
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
		r.Prefixes = append(r.Prefixes, Prefix{Prefix: prefix, Values: n})
	}
	r.Counts = []Count{}
	for _, t := range census.Tallies() {
		r.Counts = append(r.Counts, Count{Resource: t.Resource, Encryption: t.Label, Provider: t.Encryption.Provider, Key: t.Encryption.Key, KeyID: t.Encryption.KeyID, Values: t.Values})
	}
	r.Total = census.Total()
	return r, nil
}

// get reads one page and turns etcd's failures into what an operator can
// act on. The first request is bounded by DialTimeout too, since it is
// the one that waits for an unreachable etcd.
func (o Scanner) get(ctx context.Context, kv Reader, from string, first bool, opts []clientv3.OpOption) (*clientv3.GetResponse, error) {
	reqCtx := ctx
	if first {
		var cancel context.CancelFunc
		reqCtx, cancel = context.WithTimeout(ctx, DialTimeout)
		defer cancel()
	}
	resp, err := kv.Get(reqCtx, from, opts...)
	endpoints := strings.Join(o.Endpoints, ",")
	switch {
	case err == nil:
		return resp, nil
	case errors.Is(err, rpctypes.ErrCompacted):
		return nil, fmt.Errorf("etcd at %s compacted the revision being read before the scan ended (kube-apiserver compacts every few minutes); run it again", endpoints)
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, ctx.Err()
	case first && reqCtx.Err() != nil:
		return nil, fmt.Errorf("read etcd at %s: no answer within %s; is etcd reachable there?", endpoints, min(DialTimeout, o.Timeout))
	case ctx.Err() != nil:
		return nil, fmt.Errorf("read etcd at %s: the scan did not finish within --timeout %s", endpoints, o.Timeout)
	default:
		return nil, fmt.Errorf("read etcd at %s: %w", endpoints, err)
	}
}

// Verdict is what the --fail-on-* checks found.
type Verdict int

const (
	// Passed: no check failed, or there were none.
	Passed Verdict = iota
	// Unsafe: a value is stored in a way a check names.
	Unsafe
	// Unknown: the checks cannot be vouched for.
	Unknown
)

// Check is the verdict of the --fail-on-* checks and the lines that say
// why, for the error output. A check fails (Unsafe) on a value it names.
// It cannot be vouched for (Unknown) when values
// were not recognised, since they may need any key, or when a prefix read
// held nothing, since a misspelt --resource would pass every check.
// Without checks it passes, and an empty prefix is only noted.
func Check(r *Report, failOnKeys []FailOnKey, failOnIdentity bool) (Verdict, []string) {
	var empty []string
	for _, p := range r.Prefixes {
		if p.Values == 0 {
			empty = append(empty, p.Prefix)
		}
	}
	if len(failOnKeys) == 0 && !failOnIdentity {
		var notes []string
		for _, p := range empty {
			notes = append(notes, "note: nothing is stored under "+p)
		}
		return Passed, notes
	}
	var unsafe, unknown []string
	for _, k := range failOnKeys {
		if n, where := countWhere(r.Counts, k.Matches); n > 0 {
			unsafe = append(unsafe, fmt.Sprintf("svm: --fail-on-key %s: %s still encrypted %s (%s)", k, valuesAre(n), k.under(), where))
		}
	}
	if failOnIdentity {
		if n, where := countWhere(r.Counts, func(c Count) bool { return c.Encryption == etcdvalue.Identity }); n > 0 {
			unsafe = append(unsafe, fmt.Sprintf("svm: --fail-on-identity: %s not encrypted (%s)", valuesAre(n), where))
		}
	}
	if n, where := countWhere(r.Counts, func(c Count) bool { return c.Encryption == etcdvalue.Unrecognised }); n > 0 {
		unknown = append(unknown, fmt.Sprintf("svm: cannot vouch for the --fail-on-* checks: %s unrecognised (%s) and may need any key", valuesAre(n), where))
	}
	for _, p := range empty {
		unknown = append(unknown, "svm: cannot vouch for the --fail-on-* checks: nothing is stored under "+p+"; is the resource or the prefix misspelt?")
	}
	switch {
	case len(unsafe) > 0:
		return Unsafe, append(unsafe, unknown...)
	case len(unknown) > 0:
		return Unknown, unknown
	default:
		return Passed, nil
	}
}

// countWhere sums the counts that match, and says by resource where they
// are: "secrets 60, widgets.example.com 3".
func countWhere(counts []Count, match func(Count) bool) (int64, string) {
	var total int64
	var where []string
	byResource := map[string]int64{}
	for _, c := range counts {
		if !match(c) {
			continue
		}
		if byResource[c.Resource] == 0 {
			where = append(where, c.Resource)
		}
		byResource[c.Resource] += c.Values
		total += c.Values
	}
	for i, res := range where {
		where[i] = fmt.Sprintf("%s %d", res, byResource[res])
	}
	return total, strings.Join(where, ", ")
}

func valuesAre(n int64) string {
	if n == 1 {
		return "1 value is"
	}
	return fmt.Sprintf("%d values are", n)
}

// WriteTable writes r as svm etcd-scan prints it: a row per resource and
// way of storing, then the revision, the total and the prefixes read.
func WriteTable(w io.Writer, r *Report) error {
	var b strings.Builder
	if len(r.Counts) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
		fmt.Fprintln(tw, "RESOURCE\tENCRYPTION\tVALUES")
		for _, c := range r.Counts {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", c.Resource, c.Shown(), c.Values)
		}
		_ = tw.Flush()
	}
	prefixes := make([]string, len(r.Prefixes))
	for i, p := range r.Prefixes {
		prefixes[i] = p.Prefix
	}
	total := fmt.Sprintf("%d values", r.Total)
	if r.Total == 1 {
		total = "1 value"
	}
	fmt.Fprintf(&b, "etcd revision %d: %s under %s\n", r.Revision, total, strings.Join(prefixes, ", "))
	_, err := io.WriteString(w, b.String())
	return err
}
