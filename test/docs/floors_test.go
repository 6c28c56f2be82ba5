package docs_test

import (
	"bytes"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestProductImportsNoTestSupport: what svm runs (cmd/, internal/, pkg/,
// api/) imports nothing under test/ or hack/, where the local control
// plane and the other test support live (docs/architecture.md).
func TestProductImportsNoTestSupport(t *testing.T) {
	const module = "github.com/svm-project/svm/"
	fset := token.NewFileSet()
	checked := 0
	for _, dir := range []string{"cmd", "internal", "pkg", "api"} {
		err := filepath.WalkDir(filepath.Join(repoRoot(), dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			checked++
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(p, module+"test/") || strings.HasPrefix(p, module+"hack/") {
					rel, _ := filepath.Rel(repoRoot(), path)
					t.Errorf("%s imports %s: the product must not depend on test support", rel, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is the repository root right?", checked)
	}
}

// TestArchitectureFloorsAreTheImports holds docs/architecture.md's map of
// the packages to the code: every package of svm (cmd/, internal/, pkg/,
// api/) has exactly one row, a row names only packages that exist, and
// every package imports svm's packages only from floors below its own, as
// `go list` reports the imports of its non-test files.
func TestArchitectureFloorsAreTheImports(t *testing.T) {
	const module = "github.com/svm-project/svm/"
	arch, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	floors := map[string]int{}
	rows := regexp.MustCompile("(?m)^\\| (\\d+), [^|]*\\| ([^|]*) \\|")
	for _, m := range rows.FindAllStringSubmatch(string(arch), -1) {
		floor, _ := strconv.Atoi(m[1])
		for _, p := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[2], -1) {
			if f, ok := floors[p[1]]; ok {
				t.Errorf("architecture.md puts %s on floors %d and %d", p[1], f, floor)
			}
			floors[p[1]] = floor
		}
	}
	if len(floors) < 10 {
		t.Fatalf("found only %d packages in architecture.md's floors table; is its format still `| N, name | `package` | what |`?", len(floors))
	}

	listed := map[string]bool{}
	for path, imports := range packageImports(t, "./cmd/...", "./internal/...", "./pkg/...", "./api/...") {
		pkg := strings.TrimPrefix(path, module)
		listed[pkg] = true
		floor, ok := floors[pkg]
		if !ok {
			t.Errorf("%s has no floor in architecture.md: add a row for it", pkg)
			continue
		}
		for _, imp := range imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if f, ok := floors[dep]; ok && f >= floor {
				t.Errorf("%s (floor %d) imports %s (floor %d): a package imports only from floors below its own; move one of them, or the import", pkg, floor, dep, f)
			}
		}
	}
	for pkg := range floors {
		if !listed[pkg] {
			t.Errorf("architecture.md has a floor for %s, which is not a package of svm", pkg)
		}
	}
}

// TestOneWayIntoTheEngine: of what svm runs, only internal/operation
// calls the engine (docs/architecture.md); the engine's observers
// (metrics, health) implement its Observer and call nothing. Every
// command, controller and pkg/migrate goes through the layer, so that
// each rule about what is stored has one home.
func TestOneWayIntoTheEngine(t *testing.T) {
	const engine = "github.com/svm-project/svm/internal/migrator"
	allowed := map[string]bool{
		"github.com/svm-project/svm/internal/operation": true,
		"github.com/svm-project/svm/internal/metrics":   true,
		"github.com/svm-project/svm/internal/health":    true,
	}
	importers := 0
	for pkg, imports := range packageImports(t, "./cmd/...", "./internal/...", "./pkg/...") {
		if !slices.Contains(imports, engine) {
			continue
		}
		importers++
		if !allowed[pkg] {
			t.Errorf("%s imports the engine (internal/migrator): go through internal/operation instead", pkg)
		}
	}
	if importers == 0 {
		t.Fatal("nothing imports internal/migrator: has the engine moved? Update this test")
	}
}

// packageImports lists the packages patterns match, each with its imports.
func packageImports(t *testing.T, patterns ...string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, patterns...)...)
	cmd.Dir = repoRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		imports[fields[0]] = fields[1:]
	}
	return imports
}

// TestClientsAreBuiltInOnePlace: what svm runs builds its clients of the
// API server in internal/kubeclients only, once per process, and hands
// them down (docs/architecture.md). The engine alone builds its own
// metadata and REST clients, over a transport of its own that --qps
// limits, and takes its discovery client from the process's set.
func TestClientsAreBuiltInOnePlace(t *testing.T) {
	constructor := regexp.MustCompile(`\b(kubernetes|dynamic|metadata|discovery|apiextensionsclient|clientset|rest)\.(New[A-Za-z]*ForConfig[A-Za-z]*|NewDiscoveryClient[A-Za-z]*|HTTPClientFor|RESTClientFor[A-Za-z]*|UnversionedRESTClientFor[A-Za-z]*)\(`)
	allowed := map[string]*regexp.Regexp{
		"internal/kubeclients": regexp.MustCompile(`.`),
		"internal/migrator":    regexp.MustCompile(`^(rest\.HTTPClientFor|metadata\.NewForConfigAndClient|rest\.RESTClientForConfigAndClient)\($`),
	}
	found := 0
	for _, dir := range []string{"cmd", "internal", "pkg"} {
		err := filepath.WalkDir(filepath.Join(repoRoot(), dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(repoRoot(), path)
			pkg := filepath.ToSlash(filepath.Dir(rel))
			for _, call := range constructor.FindAllString(string(src), -1) {
				found++
				if ok := allowed[pkg]; ok == nil || !ok.MatchString(call) {
					t.Errorf("%s builds a client (%s): take it from the process's kubeclients.Set instead", rel, call)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if found < 5 {
		t.Fatalf("found only %d client constructors, kubeclients' own among them: does the pattern still match them?", found)
	}
}
