// Command consumer migrates one CustomResourceDefinition's objects and
// prunes its storedVersions with svm's public Go API, from a module of its
// own, as an operator would. svm's integration tests build it to show that
// the API is usable from outside svm's module: it may import nothing of
// svm but github.com/svm-project/svm/pkg/migrate.
//
// It prints what migrate.CRD returned as JSON on standard output, and
// exits 1 when migrate.CRD returned an error. With --retire VERSION it
// retires that version of the CRD instead (migrate.Retire), as an operator
// that dropped an old version from its CRD does at start-up, and prints
// what migrate.Retire returned.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/svm-project/svm/pkg/migrate"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig (default: in-cluster)")
	crd := flag.String("crd", "", "name of the CustomResourceDefinition to migrate, such as widgets.example.com")
	retire := flag.String("retire", "", "a version of the CRD to retire, such as v1")
	drain := flag.Duration("crd-drain-margin", 0, "how long after the CRD last changed writes under its previous storage version may still land (0: the default)")
	flag.Parse()
	if *crd == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: consumer --crd NAME [--retire VERSION] [--kubeconfig PATH]")
		os.Exit(2)
	}
	if err := run(*kubeconfig, *crd, *retire, *drain); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(kubeconfig, crd, retire string, drain time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	opts := migrate.Options{
		FieldManager:   "consumer",
		CRDDrainMargin: drain,
		OnProgress: func(p migrate.Progress) {
			fmt.Fprintf(os.Stderr, "%s: %s\n", p.Resource.Resource, p.Outcomes())
		},
	}
	var res any
	if retire == "" {
		res, err = migrate.CRD(ctx, cfg, crd, opts)
	} else {
		// A CRD is named <plural>.<group>.
		plural, group, _ := strings.Cut(crd, ".")
		gvr := schema.GroupVersionResource{Group: group, Version: retire, Resource: plural}
		res, err = migrate.Retire(ctx, cfg, gvr, migrate.RetireOptions{Options: opts})
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	if encErr := out.Encode(res); encErr != nil && err == nil {
		err = fmt.Errorf("print the result: %w", encErr)
	}
	return err
}
