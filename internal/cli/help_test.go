package cli

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// helpLimit is the most characters a flag's help may take: one line of
// --help beside the flag's name, as kubectl's own mostly are. The detail
// is in the docs.
const helpLimit = 140

// TestFlagHelpIsOneSentence holds every flag of svm's own to a help of one
// short sentence: no second sentence, no clause after a semicolon.
// kubectl's connection flags, which svm takes as kubectl defines them,
// are not svm's to word.
func TestFlagHelpIsOneSentence(t *testing.T) {
	kubectls := pflag.NewFlagSet("kubectl", pflag.ContinueOnError)
	genericclioptions.NewConfigFlags(true).AddFlags(kubectls)
	checked := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if kubectls.Lookup(f.Name) != nil || f.Name == "help" {
				return
			}
			checked++
			body := strings.TrimSuffix(f.Usage, ".")
			switch {
			case len(f.Usage) > helpLimit:
				t.Errorf("svm %s --%s: help of %d characters, want at most %d: %q", c.Name(), f.Name, len(f.Usage), helpLimit, f.Usage)
			case strings.Contains(body, ". ") || strings.Contains(body, "; "):
				t.Errorf("svm %s --%s: help of more than one sentence: %q", c.Name(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRootCommand(io.Discard, io.Discard))
	if checked < 40 {
		t.Fatalf("checked the help of %d flags: the walk misses svm's commands", checked)
	}
}
