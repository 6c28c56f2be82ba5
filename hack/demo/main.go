// Command demo shows svm's whole job on a local control plane that it starts
// itself, the way it runs in a cluster: svm's controller watches storage
// versions, notices when a CRD's storage version flips, migrates every object
// with live progress, and prunes the CRD's status.storedVersions. The demo
// then proves from etcd's raw bytes that every object is stored in the new
// version with unchanged content, and stops everything. With --kms it shows
// a KMS v2 key rotation instead: svm notices the API server writing under
// the new key and re-encrypts every Secret, and etcd's raw values, which
// name their key ID, prove that the old key is no longer needed.
//
// It is also a test (demo_test.go), so it checks what it shows: any step that
// does not come out as claimed ends the demo with an error.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/term"
)

func main() {
	var o options
	flag.StringVar(&o.BinDir, "bin-dir", "", "directory holding kube-apiserver, etcd and svm (default: the nearest bin/)")
	flag.StringVar(&o.CRDDir, "crd-dir", "config/crd/bases", "directory holding svm's CRDs")
	flag.IntVar(&o.Objects, "objects", 3000, "number of custom resources to create")
	flag.StringVar(&o.LogDir, "log-dir", "", "directory for svm's log (default: the system's temporary directory)")
	flag.Float64Var(&o.QPS, "qps", 400, "svm's request rate, low enough to watch the progress (0: unlimited)")
	kms := flag.Bool("kms", false, "show a KMS v2 key rotation instead: Secrets encrypted by a KMS v2 plugin, its key rotated, svm re-encrypting them")
	flag.Parse()
	o.Out = os.Stdout
	o.Terminal = term.IsTerminal(int(os.Stdout.Fd()))
	if o.BinDir != "" {
		o.SVM = filepath.Join(o.BinDir, "svm")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	demo := run
	if *kms {
		demo = runKMS
	}
	if err := demo(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	fmt.Printf("\ndemo finished in %s\n", time.Since(start).Round(time.Second))
}

// options configure a demo run.
type options struct {
	BinDir  string // kube-apiserver and etcd
	SVM     string // the svm binary
	CRDDir  string
	Objects int
	QPS     float64
	LogDir  string // where svm's log goes (default: the system's temporary directory)
	// Out receives the narration; Terminal redraws the progress bar in
	// place instead of printing a line per update.
	Out      io.Writer
	Terminal bool
}
