// Command svm migrates Kubernetes objects to their current storage version.
//
// See `svm --help` and the README.
package main

import (
	"os"

	"github.com/svm-project/svm/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
