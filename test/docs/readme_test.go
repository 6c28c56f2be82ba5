package docs_test

import (
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/docs"
	"github.com/svm-project/svm/test/framework"
)

// A README command runs here when it can run on a control plane in a
// minute: each step of a scenario runs one, as printed, on the scenario's
// own control plane, after what the README takes for granted is set up,
// and checks what the command did. The steps of a scenario run in order.
type step struct {
	// command is the command as the README prints it, without its comment.
	command string
	// before sets up what the command needs that the README assumes.
	before func(t *testing.T, env *framework.Env)
	// code is the exit code the command must end with.
	code int
	// after checks what the command did.
	after func(t *testing.T, env *framework.Env, stdout string)
}

// scenarios are the README commands test/docs runs, by scenario. Helm's
// install would clash with kustomize's on one cluster, so it has a control
// plane of its own.
func scenarios() map[string][]step {
	var widgets framework.Snapshot
	return map[string][]step{
		"kustomize and the CLI": {{
			command: "kubectl apply -k config/default",
			after: func(t *testing.T, env *framework.Env, _ string) {
				env.WaitEstablished(t, "storageversionmigrations.migration.k8s.io")
				env.WaitEstablished(t, "storagestates.migration.k8s.io")
			},
		}, {
			command: "svm migrate secrets",
			before: func(t *testing.T, env *framework.Env) {
				env.CreateSecrets(t, []string{"readme"}, 10)
			},
			after: func(t *testing.T, _ *framework.Env, stdout string) {
				expectOutput(t, stdout, "secrets: done")
			},
		}, {
			command: "svm migrate widgets.example.com",
			before: func(t *testing.T, env *framework.Env) {
				// A CRD whose storage version was flipped: what the command is for.
				env.CreateWidgetCRD(t, "v1")
				widgets = env.StoredInOldVersion(t, framework.WidgetResource, []string{"readme"}, readmeWidgets)
			},
			after: func(t *testing.T, env *framework.Env, _ string) {
				env.ExpectStored(t, framework.WidgetResource.EtcdPrefix(), map[string]int{"example.com/v2": readmeWidgets})
				env.ExpectUnchanged(t, framework.Widgets, widgets)
			},
		}, {
			command: "svm migrate --all",
			after: func(t *testing.T, _ *framework.Env, stdout string) {
				expectOutput(t, stdout, "secrets: done", "widgets.example.com: done", "deployments.apps: done")
			},
		}, {
			command: "svm status",
		}, {
			command: "svm retire widgets.v1.example.com --dry-run",
			after: func(t *testing.T, env *framework.Env, stdout string) {
				expectOutput(t, stdout, "dry run, nothing written")
				expectStoredVersions(t, env, "v1", "v2")
			},
		}, {
			command: "svm retire widgets.v1.example.com",
			after: func(t *testing.T, env *framework.Env, _ string) {
				expectStoredVersions(t, env, "v2")
			},
		}, {
			// Without svm controller's StorageStates nothing says what was
			// stored before, so most resources are unknown: exit code 4. The
			// CRD retired above is safe.
			command: "svm check-upgrade --to 1.39",
			code:    4,
			after: func(t *testing.T, _ *framework.Env, stdout string) {
				if !regexp.MustCompile(`(?m)^widgets\.example\.com\s.*\ssafe\s`).MatchString(stdout) {
					t.Errorf("widgets.example.com is not safe:\n%s", stdout)
				}
			},
		}, {
			command: "kubectl create -f config/samples/migration_v1alpha1_storageversionmigration.yaml",
		}, {
			command: "kubectl wait --for=condition=Succeeded storageversionmigrations.migration.k8s.io --all --timeout=1h",
			before: func(t *testing.T, env *framework.Env) {
				// The controller the README installs, which cannot run here (no
				// node runs its Deployment): the same binary, as a process.
				env.StartSVM(t, framework.ControllerArgs("--trigger=false")...)
			},
			after: func(t *testing.T, _ *framework.Env, stdout string) {
				expectOutput(t, stdout, "condition met")
			},
		}},
		"helm": {{
			command: "helm install svm charts/svm -n svm-system --create-namespace --set image.repository=<registry>/svm --set image.tag=<tag>",
			after: func(t *testing.T, env *framework.Env, _ string) {
				d, err := env.Kube.AppsV1().Deployments("svm-system").Get(framework.Context(t, time.Minute), "svm-controller", metav1.GetOptions{})
				if err != nil {
					t.Fatalf("the Deployment helm installed: %v", err)
				}
				if got, want := d.Spec.Template.Spec.Containers[0].Image, placeholders["<registry>"]+"/svm:"+placeholders["<tag>"]; got != want {
					t.Errorf("the Deployment runs %s, want %s", got, want)
				}
				env.WaitEstablished(t, "storageversionmigrations.migration.k8s.io")
			},
		}},
	}
}

const readmeWidgets = 25

// placeholders are what the README leaves to the reader, and what the
// scenarios fill in.
var placeholders = map[string]string{
	"<registry>": "registry.example.com",
	"<tag>":      "v0.0.0-readme",
}

// elsewhere are the README commands that run in another package's test,
// which takes longer or needs more than a control plane: that test's
// package holds the function and, where given, the command as a string
// literal, which is what it runs. A make command's target must also be in
// the Makefile.
var elsewhere = []struct {
	command string
	// dir and test name the test that runs it, "" for none but the
	// Makefile's own target (make test, which CI runs).
	dir, test string
	// literal is the command as the test holds it, "" when it runs the
	// command's program another way (TestDemo runs the demo's main).
	literal string
}{
	{command: "make demo", dir: "hack/demo", test: "TestDemo"},
	{command: "make test"},
	{command: "go install ./cmd/svm", dir: "test/integration/cli", test: "TestInstallFromCheckoutAsPrinted", literal: "go install ./cmd/svm"},
	{command: "go build -o ~/bin/kubectl-svm ./cmd/svm", dir: "test/integration/cli", test: "TestKubectlPlugin", literal: "go build -o ~/bin/kubectl-svm ./cmd/svm"},
}

// TestReadmeCommandsRun holds the README to what works: every command it
// prints in a shell block is run, here or by the test named for it
// elsewhere, and one that nothing runs fails the test, as does a step for
// a command the README no longer prints.
func TestReadmeCommandsRun(t *testing.T) {
	printed := readmeCommands(t)
	if len(printed) < 10 {
		t.Fatalf("found only %d commands in README.md's shell blocks; the scanner misses them", len(printed))
	}
	words := map[string][]string{}
	for _, c := range printed {
		words[c.Text] = c.Words
	}
	all := scenarios()
	runs := map[string]string{}
	for name, steps := range all {
		for _, s := range steps {
			runs[s.command] = "test/docs, scenario " + name
		}
	}
	for _, e := range elsewhere {
		runs[e.command] = "elsewhere"
	}
	for _, c := range printed {
		if runs[c.Text] == "" {
			t.Errorf("README.md:%d prints `%s`, which no test runs: add it to a scenario in test/docs/readme_test.go (or name the test that runs it in elsewhere)", c.Line, c.Text)
		}
	}
	for command, where := range runs {
		if !slices.ContainsFunc(printed, func(c docs.Command) bool { return c.Text == command }) {
			t.Errorf("%s runs `%s`, which README.md no longer prints: run what it prints instead", where, command)
		}
	}
	if t.Failed() {
		return
	}

	t.Run("elsewhere", func(t *testing.T) {
		for _, e := range elsewhere {
			checkElsewhere(t, e.command, e.dir, e.test, e.literal)
		}
	})
	for name, steps := range all {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runScenario(t, steps, words)
		})
	}
}

// readmeCommands returns the commands in README.md's shell blocks. Every
// block must say its language: one that does not could hold commands no
// test runs.
func readmeCommands(t *testing.T) []docs.Command {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(repoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []docs.Command
	for _, f := range docs.Fences(string(readme)) {
		switch f.Info {
		case "sh":
			c, err := f.ShellCommands()
			if err != nil {
				t.Errorf("README.md: %v", err)
			}
			cmds = append(cmds, c...)
		case "":
			t.Errorf("README.md:%d: a code block without a language: mark commands sh (and they are run), anything else by its language", f.Line)
		}
	}
	return cmds
}

// checkElsewhere checks that the test named for command exists and holds
// the command it runs, and for make that the Makefile has the target.
func checkElsewhere(t *testing.T, command, dir, test, literal string) {
	t.Helper()
	if target, ok := strings.CutPrefix(command, "make "); ok {
		makefile, err := os.ReadFile(filepath.Join(repoRoot(), "Makefile"))
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).Match(makefile) {
			t.Errorf("`%s`: the Makefile has no target %s", command, target)
		}
	}
	if test == "" {
		return
	}
	files, err := filepath.Glob(filepath.Join(repoRoot(), dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	var foundTest, foundLiteral bool
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				foundTest = foundTest || n.Recv == nil && n.Name.Name == test
			case *ast.BasicLit:
				if s, err := strconv.Unquote(n.Value); n.Kind == token.STRING && err == nil && s == literal {
					foundLiteral = true
				}
			}
			return true
		})
	}
	if !foundTest {
		t.Errorf("`%s` is said to run in %s's %s, which does not exist", command, dir, test)
	}
	if literal != "" && !foundLiteral {
		t.Errorf("`%s`: %s's tests do not hold the command %q that %s runs", command, dir, literal, test)
	}
}

// runScenario runs steps in order on a control plane of their own; words
// are the printed commands' words, as a shell splits them.
func runScenario(t *testing.T, steps []step, words map[string][]string) {
	env := framework.Start(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)
	home := t.TempDir()
	for _, s := range steps {
		if t.Failed() {
			t.Logf("not running `%s`: an earlier step failed", s.command)
			continue
		}
		if s.before != nil {
			s.before(t, env)
		}
		code, stdout, stderr := runAsPrinted(t, env, kubeconfig, home, s.command, words[s.command])
		t.Logf("`%s` exited %d\nstdout:\n%s\nstderr:\n%s", s.command, code, stdout, stderr)
		if code != s.code {
			t.Errorf("`%s` exited %d, want %d", s.command, code, s.code)
			continue
		}
		if s.after != nil {
			s.after(t, env, stdout)
		}
	}
}

// runAsPrinted runs command as a reader would, in the repository's root,
// with its placeholders filled in and the scenario's cluster as the
// kubeconfig's (KUBECONFIG, which kubectl, helm and svm read alike).
func runAsPrinted(t *testing.T, env *framework.Env, kubeconfig, home, command string, printed []string) (code int, stdout, stderr string) {
	t.Helper()
	words := slices.Clone(printed)
	for i, w := range words {
		for p, v := range placeholders {
			w = strings.ReplaceAll(w, p, v)
		}
		if strings.ContainsAny(w, "<>") {
			t.Fatalf("`%s`: %q holds a placeholder the scenarios do not fill in", command, w)
		}
		words[i] = w
	}
	var bin string
	switch words[0] {
	case "svm":
		bin = framework.SVMBinary(t)
	case "kubectl", "helm":
		bin = env.CP.BinPath(words[0])
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s is not built (make %s): %v", words[0], words[0], err)
		}
	default:
		t.Fatalf("`%s`: test/docs runs svm, kubectl and helm, not %s", command, words[0])
	}
	cmd := exec.CommandContext(framework.Context(t, 5*time.Minute), bin, words[1:]...)
	cmd.Dir = repoRoot()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "HELM_") && !strings.HasPrefix(kv, "HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "KUBECONFIG="+kubeconfig, "HOME="+home,
		"HELM_CACHE_HOME="+filepath.Join(home, "helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "helm-config"),
		"HELM_DATA_HOME="+filepath.Join(home, "helm-data"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		code = exit.ExitCode()
	default:
		t.Fatalf("`%s`: %v\nstdout:\n%s\nstderr:\n%s", command, err, out.String(), errOut.String())
	}
	return code, out.String(), errOut.String()
}

func expectOutput(t *testing.T, stdout string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(stdout, w) {
			t.Errorf("the output lacks %q:\n%s", w, stdout)
		}
	}
}

func expectStoredVersions(t *testing.T, env *framework.Env, want ...string) {
	t.Helper()
	if got := env.CRDStoredVersions(t, framework.WidgetsCRDName); !slices.Equal(got, want) {
		t.Errorf("the CRD's status.storedVersions are %v, want %v", got, want)
	}
}
