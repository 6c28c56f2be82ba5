package cli

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

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/svm-project/svm/internal/document"
	"github.com/svm-project/svm/internal/etcdvalue"
)

// EtcdScanVersion identifies the shape of EtcdScanReport. Fields may be
// added under the same version; a field that is removed, renamed or
// changes meaning makes a new version, so a script can check it before
// trusting the rest.
const EtcdScanVersion = "v1"

// etcdDialTimeout bounds the wait for etcd's first answer: an endpoint
// that is down should fail the command in seconds, not at --timeout.
const etcdDialTimeout = 10 * time.Second

// EtcdScanReport is the document printed by `svm etcd-scan -o json`. It
// holds counts only: no etcd key (which names an object) and no byte of
// any value.
type EtcdScanReport struct {
	// Version is the EtcdScanVersion of this structure.
	Version string `json:"version"`
	// Revision is the etcd revision every value was read at: the counts
	// are one consistent snapshot of etcd at that revision.
	Revision int64 `json:"revision"`
	// Prefixes are the key prefixes read, with how many values each holds.
	Prefixes []EtcdScanPrefix `json:"prefixes"`
	// Counts are the values by resource and encryption, sorted by both.
	Counts []EtcdScanCount `json:"counts"`
	// Total is the number of values read.
	Total int64 `json:"total"`
}

// EtcdScanPrefix is a key prefix that was read.
type EtcdScanPrefix struct {
	Prefix string `json:"prefix"`
	Values int64  `json:"values"`
}

// EtcdScanCount is how many values of one resource are stored one way.
type EtcdScanCount struct {
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
	Values   int64  `json:"values"`
}

// EtcdScanOptions are the options of `svm etcd-scan`.
type EtcdScanOptions struct {
	// Endpoints is the --endpoints flag: etcd client URLs, comma-separated.
	Endpoints string
	// CACert, Cert and Key are PEM files for TLS to https endpoints.
	CACert, Cert, Key string
	// Prefix is where to read, under /registry/.
	Prefix string
	// Resources restrict the read to these resources' keys.
	Resources []string
	// Output is table or json.
	Output   string
	Timeout  time.Duration
	PageSize int64
	// FailOnKeys and FailOnIdentity make the command exit ExitUnsafe when
	// a value is encrypted under one of these keys, or not encrypted.
	FailOnKeys     []string
	FailOnIdentity bool

	Out, ErrOut io.Writer

	endpoints []string
	prefixes  []string
}

var etcdScanOutputs = []string{"table", "json"}

func newEtcdScanCommand(out, errOut io.Writer) *cobra.Command {
	o := &EtcdScanOptions{Out: out, ErrOut: errOut}
	cmd := &cobra.Command{
		Use:   "etcd-scan --endpoints URL[,URL...]",
		Short: "Count the values in etcd by resource and encryption key, reading etcd directly",
		Long: "Read what kube-apiserver stored in etcd, under /registry/ only and never writing, and count the\n" +
			"values of each resource by how they are stored: encrypted under a provider and key\n" +
			"(aescbc:v1:key1; kms:v2:NAME, named after the KMS provider), in plain text (identity), or\n" +
			"unrecognised. Only counts are printed, never a key (an object's name) nor a byte of a value.\n" +
			"Every page is read at the etcd revision of the first, so the counts are one snapshot, and the\n" +
			"revision is printed.\n\n" +
			"Before removing an old encryption key from the API servers' configuration, this is the proof\n" +
			"that no stored value still needs it: after `svm migrate secrets`, `svm etcd-scan --resource\n" +
			"secrets --fail-on-key OLD` exits 0 only if no Secret is encrypted under OLD.\n\n" +
			"Resources are named as they are stored: RESOURCE for keys under /registry/<resource>/, which\n" +
			"is where kube-apiserver keeps its built-in resources whatever their group (secrets,\n" +
			"deployments), and RESOURCE.GROUP for keys under /registry/<group>/<resource>/ (custom\n" +
			"resources). Keys of neither shape are counted as <other>.\n\n" +
			"Exit codes: 0 done, and no --fail-on-* check failed; 3 a --fail-on-key or --fail-on-identity\n" +
			"check failed; 4 a --fail-on-* check cannot be vouched for (unrecognised values, or nothing\n" +
			"stored under a prefix read); 1 the scan could not be made.",
		Example: "  svm etcd-scan --endpoints https://10.0.0.1:2379 --cacert ca.crt --cert client.crt --key client.key\n" +
			"  svm etcd-scan --endpoints http://127.0.0.1:2379 --resource secrets --fail-on-key key1\n" +
			"  svm etcd-scan --endpoints http://127.0.0.1:2379 --resource widgets.example.com -o json",
		Args: cobra.NoArgs,
		RunE: runOptions(o, o.Run),
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Endpoints, "endpoints", "", "etcd client URLs, comma-separated (http:// or https://)")
	fs.StringVar(&o.CACert, "cacert", "", "PEM file of the CAs that sign etcd's serving certificate (https endpoints; default: the system's)")
	fs.StringVar(&o.Cert, "cert", "", "PEM file of the client certificate for etcd (https endpoints; needs --key)")
	fs.StringVar(&o.Key, "key", "", "PEM file of the client certificate's private key (needs --cert)")
	fs.StringVar(&o.Prefix, "prefix", etcdvalue.RegistryPrefix, "read keys under this prefix only; it must start with "+etcdvalue.RegistryPrefix)
	fs.StringArrayVar(&o.Resources, "resource", nil, "read only this resource's keys, RESOURCE or RESOURCE.GROUP as stored (see above); may be repeated")
	fs.StringVarP(&o.Output, "output", "o", "table", "output format: "+strings.Join(etcdScanOutputs, ", ")+" (json has a stable, versioned structure)")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "give up when the scan takes longer")
	fs.Int64Var(&o.PageSize, "page-size", 500, "values read per request")
	fs.StringArrayVar(&o.FailOnKeys, "fail-on-key", nil, "exit 3 if any value read is encrypted under the key of this name (for KMS, the provider's name); may be repeated")
	fs.BoolVar(&o.FailOnIdentity, "fail-on-identity", false, "exit 3 if any value read is not encrypted")
	_ = cmd.MarkFlagRequired("endpoints")
	return cmd
}

// Complete splits the endpoints and works out the prefixes to read.
func (o *EtcdScanOptions) Complete() error {
	o.endpoints = nil
	for e := range strings.SplitSeq(o.Endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			o.endpoints = append(o.endpoints, e)
		}
	}
	var err error
	o.prefixes, err = scanPrefixes(o.Prefix, o.Resources)
	return err
}

// Validate checks the flags.
func (o *EtcdScanOptions) Validate() error {
	if len(o.endpoints) == 0 {
		return errors.New("--endpoints must name at least one etcd client URL")
	}
	secure, err := endpointsSecure(o.endpoints)
	if err != nil {
		return err
	}
	if (o.Cert == "") != (o.Key == "") {
		return errors.New("--cert and --key go together: give both or neither")
	}
	if !secure && (o.CACert != "" || o.Cert != "") {
		return errors.New("--cacert, --cert and --key are for https:// endpoints")
	}
	if err := validateOutput(o.Output, etcdScanOutputs); err != nil {
		return err
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", o.Timeout)
	}
	if o.PageSize < 1 {
		return fmt.Errorf("--page-size must be at least 1, got %d", o.PageSize)
	}
	for _, k := range o.FailOnKeys {
		if k == "" || strings.Contains(k, ":") {
			return fmt.Errorf("--fail-on-key %q: want the name of a key in the encryption configuration", k)
		}
	}
	return nil
}

// endpointsSecure checks that every endpoint is an http:// or https://
// URL, all of one kind, and reports whether they are https.
func endpointsSecure(endpoints []string) (bool, error) {
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

// scanPrefixes are the key prefixes to read: prefix, or, with resources,
// each resource's keys within prefix. Nothing outside RegistryPrefix is
// read: etcd-scan is for what kube-apiserver stored, and has no business
// with anything else an etcd may hold.
func scanPrefixes(prefix string, resources []string) ([]string, error) {
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

// Run reads the prefixes, prints the counts, and returns the exit code
// of the --fail-on-* checks.
func (o *EtcdScanOptions) Run(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	client, err := o.newClient()
	if err != nil {
		return 0, err
	}
	defer client.Close()
	r, err := o.scan(ctx, client.KV)
	if err != nil {
		return 0, err
	}
	if o.Output == "json" {
		err = document.WriteJSON(o.Out, r)
	} else {
		err = writeEtcdScanTable(o.Out, r)
	}
	if err != nil {
		return 0, err
	}
	code, lines := etcdScanVerdict(r, o.FailOnKeys, o.FailOnIdentity)
	for _, l := range lines {
		fmt.Fprintln(o.ErrOut, l)
	}
	return code, nil
}

func (o *EtcdScanOptions) newClient() (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   o.endpoints,
		DialTimeout: etcdDialTimeout,
		// The client's own logs would repeat, on every retry, what the
		// one error returned says.
		Logger: zap.NewNop(),
	}
	if secure, _ := endpointsSecure(o.endpoints); secure {
		var err error
		if cfg.TLS, err = etcdTLSConfig(o.CACert, o.Cert, o.Key); err != nil {
			return nil, err
		}
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to etcd at %s: %w", strings.Join(o.endpoints, ","), err)
	}
	return client, nil
}

func etcdTLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
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

// etcdReader is all that etcd-scan may do to etcd.
type etcdReader interface {
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
}

// scan reads every prefix page by page, in key order, each page from the
// key after the last one read. Every page after the first is read at the
// first's revision: whatever the API server writes meanwhile, the counts
// are of one moment of etcd, not of a mix of before and after.
func (o *EtcdScanOptions) scan(ctx context.Context, kv etcdReader) (*EtcdScanReport, error) {
	var census etcdvalue.Census
	r := &EtcdScanReport{Version: EtcdScanVersion}
	for _, prefix := range o.prefixes {
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
		r.Prefixes = append(r.Prefixes, EtcdScanPrefix{Prefix: prefix, Values: n})
	}
	r.Counts = []EtcdScanCount{}
	for _, t := range census.Tallies() {
		r.Counts = append(r.Counts, EtcdScanCount{Resource: t.Resource, Encryption: t.Label, Provider: t.Encryption.Provider, Key: t.Encryption.Key, Values: t.Values})
	}
	r.Total = census.Total()
	return r, nil
}

// get reads one page and turns etcd's failures into what an operator can
// act on. The first request is bounded by etcdDialTimeout too, since it is
// the one that waits for an unreachable etcd.
func (o *EtcdScanOptions) get(ctx context.Context, kv etcdReader, from string, first bool, opts []clientv3.OpOption) (*clientv3.GetResponse, error) {
	reqCtx := ctx
	if first {
		var cancel context.CancelFunc
		reqCtx, cancel = context.WithTimeout(ctx, etcdDialTimeout)
		defer cancel()
	}
	resp, err := kv.Get(reqCtx, from, opts...)
	endpoints := strings.Join(o.endpoints, ",")
	switch {
	case err == nil:
		return resp, nil
	case errors.Is(err, rpctypes.ErrCompacted):
		return nil, fmt.Errorf("etcd at %s compacted the revision being read before the scan ended (kube-apiserver compacts every few minutes); run it again", endpoints)
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, ctx.Err()
	case first && reqCtx.Err() != nil:
		return nil, fmt.Errorf("read etcd at %s: no answer within %s; is etcd reachable there?", endpoints, min(etcdDialTimeout, o.Timeout))
	case ctx.Err() != nil:
		return nil, fmt.Errorf("read etcd at %s: the scan did not finish within --timeout %s", endpoints, o.Timeout)
	default:
		return nil, fmt.Errorf("read etcd at %s: %w", endpoints, err)
	}
}

// etcdScanVerdict is the exit code of the --fail-on-* checks and the
// lines that say why, for the error output. A check fails (ExitUnsafe) on
// a value it names. It cannot be vouched for (ExitUnknown) when values
// were not recognised, since they may need any key, or when a prefix read
// held nothing, since a misspelt --resource would pass every check.
// Without checks the code is 0, and an empty prefix is only noted.
func etcdScanVerdict(r *EtcdScanReport, failOnKeys []string, failOnIdentity bool) (int, []string) {
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
		return 0, notes
	}
	var unsafe, unknown []string
	for _, name := range failOnKeys {
		if n, where := countWhere(r.Counts, func(c EtcdScanCount) bool { return c.Key == name }); n > 0 {
			unsafe = append(unsafe, fmt.Sprintf("svm: --fail-on-key %s: %s still encrypted under key %s (%s)", name, valuesAre(n), name, where))
		}
	}
	if failOnIdentity {
		if n, where := countWhere(r.Counts, func(c EtcdScanCount) bool { return c.Encryption == etcdvalue.Identity }); n > 0 {
			unsafe = append(unsafe, fmt.Sprintf("svm: --fail-on-identity: %s not encrypted (%s)", valuesAre(n), where))
		}
	}
	if n, where := countWhere(r.Counts, func(c EtcdScanCount) bool { return c.Encryption == etcdvalue.Unrecognised }); n > 0 {
		unknown = append(unknown, fmt.Sprintf("svm: cannot vouch for the --fail-on-* checks: %s unrecognised (%s) and may need any key", valuesAre(n), where))
	}
	for _, p := range empty {
		unknown = append(unknown, "svm: cannot vouch for the --fail-on-* checks: nothing is stored under "+p+"; is the resource or the prefix misspelt?")
	}
	switch {
	case len(unsafe) > 0:
		return ExitUnsafe, append(unsafe, unknown...)
	case len(unknown) > 0:
		return ExitUnknown, unknown
	default:
		return 0, nil
	}
}

// countWhere sums the counts that match, and says by resource where they
// are: "secrets 60, widgets.example.com 3".
func countWhere(counts []EtcdScanCount, match func(EtcdScanCount) bool) (int64, string) {
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

func writeEtcdScanTable(w io.Writer, r *EtcdScanReport) error {
	var b strings.Builder
	if len(r.Counts) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
		fmt.Fprintln(tw, "RESOURCE\tENCRYPTION\tVALUES")
		for _, c := range r.Counts {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", c.Resource, c.Encryption, c.Values)
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
