package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svm-project/svm/internal/document"
	"github.com/svm-project/svm/internal/etcdscan"
	"github.com/svm-project/svm/internal/etcdvalue"
)

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
	// a value is encrypted under one of these keys (see
	// etcdscan.FailOnKey), or not encrypted.
	FailOnKeys     []string
	FailOnIdentity bool

	Out, ErrOut io.Writer

	endpoints  []string
	prefixes   []string
	failOnKeys []etcdscan.FailOnKey
}

var etcdScanOutputs = []string{"table", "json"}

func newEtcdScanCommand(out, errOut io.Writer) *cobra.Command {
	o := &EtcdScanOptions{Out: out, ErrOut: errOut}
	cmd := &cobra.Command{
		Use:   "etcd-scan --endpoints URL[,URL...]",
		Short: "Count the values in etcd by resource and encryption key, reading etcd directly",
		Long: "Read what kube-apiserver stored in etcd, under /registry/ only and never writing, and count the\n" +
			"values of each resource by how they are stored: encrypted under a provider and key\n" +
			"(aescbc:v1:key1; kms:v2:NAME:KEYID, named after the KMS v2 provider and the key ID that sealed\n" +
			"the value), in plain text (identity), or unrecognised. Only counts are printed, never a key\n" +
			"(an object's name) nor a byte of a value beyond what its envelope keeps in the clear.\n" +
			"Every page is read at the etcd revision of the first, so the counts are one snapshot, and the\n" +
			"revision is printed.\n\n" +
			"Before removing an old encryption key from the API servers' configuration, this is the proof\n" +
			"that no stored value still needs it: after `svm migrate secrets`, `svm etcd-scan --resource\n" +
			"secrets --fail-on-key OLD` exits 0 only if no Secret is encrypted under OLD. OLD is the name\n" +
			"of a key (for KMS, of the provider) or a KMS v2 key ID without colons; or kms:v2:NAME:KEYID\n" +
			"as the table shows it, the key ID quoted when the table quotes it (kms:v2:vault:\"key 2\").\n\n" +
			"Resources are named as they are stored: RESOURCE for keys under /registry/<resource>/, which\n" +
			"is where kube-apiserver keeps its built-in resources whatever their group (secrets,\n" +
			"deployments), and RESOURCE.GROUP for keys under /registry/<group>/<resource>/ (custom\n" +
			"resources). Keys of neither shape are counted as <other>.\n\n" +
			"Exit codes: 0 done, and no --fail-on-* check failed; 3 a --fail-on-key or --fail-on-identity\n" +
			"check failed; 4 a --fail-on-* check cannot be vouched for (unrecognised values, or nothing\n" +
			"stored under a prefix read); 1 the scan could not be made.",
		Example: "  svm etcd-scan --endpoints https://10.0.0.1:2379 --cacert ca.crt --cert client.crt --key client.key\n" +
			"  svm etcd-scan --endpoints http://127.0.0.1:2379 --resource secrets --fail-on-key key1\n" +
			"  svm etcd-scan --endpoints http://127.0.0.1:2379 --resource secrets --fail-on-key kms:v2:vault:transit-key-3\n" +
			"  svm etcd-scan --endpoints http://127.0.0.1:2379 --resource widgets.example.com -o json",
		Args: cobra.NoArgs,
		RunE: runOptions(o, o.Run),
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Endpoints, "endpoints", "", "etcd client URLs, comma-separated (http:// or https://)")
	fs.StringVar(&o.CACert, "cacert", "", "PEM file of the CAs that sign etcd's serving certificate, for https endpoints (default: the system's)")
	fs.StringVar(&o.Cert, "cert", "", "PEM file of the client certificate for etcd, for https endpoints (with --key)")
	fs.StringVar(&o.Key, "key", "", "PEM file of the client certificate's private key (needs --cert)")
	fs.StringVar(&o.Prefix, "prefix", etcdvalue.RegistryPrefix, "read only the keys under this prefix, which must start with "+etcdvalue.RegistryPrefix)
	fs.StringArrayVar(&o.Resources, "resource", nil, "read only this resource's keys, RESOURCE or RESOURCE.GROUP as stored (repeatable)")
	fs.StringVarP(&o.Output, "output", "o", "table", "output format: "+strings.Join(etcdScanOutputs, ", ")+" (json has a stable, versioned structure)")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "give up when the scan takes longer")
	fs.Int64Var(&o.PageSize, "page-size", 500, "values read per request")
	fs.StringArrayVar(&o.FailOnKeys, "fail-on-key", nil, "exit 3 if any value read is encrypted under this key: a key's name, a KMS v2 key ID or kms:v2:PROVIDER:KEYID (repeatable)")
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
	o.prefixes, err = etcdscan.Prefixes(o.Prefix, o.Resources)
	return err
}

// Validate checks the flags.
func (o *EtcdScanOptions) Validate() error {
	if len(o.endpoints) == 0 {
		return errors.New("--endpoints must name at least one etcd client URL")
	}
	secure, err := etcdscan.EndpointsSecure(o.endpoints)
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
	o.failOnKeys = nil
	for _, arg := range o.FailOnKeys {
		k, err := etcdscan.ParseFailOnKey(arg)
		if err != nil {
			return err
		}
		o.failOnKeys = append(o.failOnKeys, k)
	}
	return nil
}

// Run reads the prefixes, prints the counts, and returns the exit code
// of the --fail-on-* checks.
func (o *EtcdScanOptions) Run(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	client, err := etcdscan.Dial(o.endpoints, o.CACert, o.Cert, o.Key)
	if err != nil {
		return 0, err
	}
	defer client.Close()
	r, err := etcdscan.Scanner{Endpoints: o.endpoints, PageSize: o.PageSize, Timeout: o.Timeout}.Scan(ctx, client.KV, o.prefixes)
	if err != nil {
		return 0, err
	}
	if o.Output == "json" {
		err = document.WriteJSON(o.Out, r)
	} else {
		err = etcdscan.WriteTable(o.Out, r)
	}
	if err != nil {
		return 0, err
	}
	verdict, lines := etcdscan.Check(r, o.failOnKeys, o.FailOnIdentity)
	for _, l := range lines {
		fmt.Fprintln(o.ErrOut, l)
	}
	return exitCodes[verdict], nil
}

// exitCodes are etcd-scan's exit codes for the verdicts of its checks.
var exitCodes = map[etcdscan.Verdict]int{etcdscan.Passed: 0, etcdscan.Unsafe: ExitUnsafe, etcdscan.Unknown: ExitUnknown}
