// Command controlplane runs a local etcd, kube-apiserver and
// kube-controller-manager in the foreground until it is interrupted, for the
// demo and for trying svm by hand.
//
//	go run ./hack/controlplane --dir _output/controlplane
//
// kube-controller-manager runs only Kubernetes' own storage version migrator
// and the garbage collector it needs, as a 1.37 cluster would, so that svm
// can be tried beside it; --controller-manager=false leaves it out.
//
// It writes DIR/kubeconfig (an admin kubeconfig) and DIR/etcd-endpoint (the
// etcd client URL, for reading raw stored values), and stops every process
// cleanly on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/svm-project/svm/test/controlplane"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		dir     = flag.String("dir", "_output/controlplane", "directory for the kubeconfig, etcd endpoint, data and logs")
		binDir  = flag.String("bin-dir", "", "directory holding kube-apiserver, etcd and kube-controller-manager (default $"+controlplane.BinDirEnv+" or ./bin)")
		flags   = flag.String("apiserver-flags", "", "extra kube-apiserver flags, separated by spaces")
		withKCM = flag.Bool("controller-manager", true, "also run kube-controller-manager with the in-tree storage version migrator and the garbage collector")
		release = flag.String("release", "", "the Kubernetes release to run, such as 1.34 or v1.35.4, built by make matrix (default: make controlplane's)")
	)
	flag.Parse()

	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	// A fresh control plane each time: stale data from an earlier run would
	// make the demo's before/after comparison meaningless.
	if err := os.RemoveAll(abs); err != nil {
		return fmt.Errorf("clean %s: %w", abs, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cp, err := controlplane.Start(ctx, controlplane.Options{
		BinDir:            *binDir,
		Dir:               abs,
		APIServerFlags:    strings.Fields(*flags),
		ControllerManager: *withKCM,
		Release:           *release,
	})
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(abs, "kubeconfig")
	endpointFile := filepath.Join(abs, "etcd-endpoint")
	if err := cp.WriteKubeconfig(kubeconfig); err == nil {
		err = os.WriteFile(endpointFile, []byte(cp.EtcdURL+"\n"), 0o600)
	}
	if err != nil {
		_ = cp.Stop()
		return err
	}
	fmt.Printf("control plane ready\n  API server:  %s\n  kubeconfig:  %s\n  etcd:        %s (also in %s)\n  logs:        %s\n",
		cp.APIServerURL, kubeconfig, cp.EtcdURL, endpointFile, abs)
	if cp.ControllerManagerRunning() {
		fmt.Printf("  kube-controller-manager (in-tree storage version migrator): log %s\n", cp.ControllerManagerLog())
	}
	fmt.Println("press Ctrl-C to stop")

	<-ctx.Done()
	fmt.Println("stopping control plane")
	return cp.Stop()
}
