package docs_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
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
