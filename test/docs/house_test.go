package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFunctionLines is the longest a function of svm may be. A reconcile,
// a decision or a round longer than a screen is read as a wall: past this,
// it wants named steps (docs/architecture.md).
const maxFunctionLines = 80

// TestNoFunctionLongerThanAScreen holds every function of what svm runs
// (cmd/, internal/, pkg/, api/; tests and generated code aside) to
// maxFunctionLines.
func TestNoFunctionLongerThanAScreen(t *testing.T) {
	fset := token.NewFileSet()
	funcs := 0
	for _, dir := range []string{"cmd", "internal", "pkg", "api"} {
		err := filepath.WalkDir(filepath.Join(repoRoot(), dir), func(path string, d fs.DirEntry, err error) error {
			name := d.Name()
			if err != nil || d.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "zz_generated") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				funcs++
				lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
				if lines > maxFunctionLines {
					rel, _ := filepath.Rel(repoRoot(), path)
					t.Errorf("%s: %s is %d lines, more than %d: give its steps names", rel, fn.Name.Name, lines, maxFunctionLines)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if funcs < 500 {
		t.Fatalf("read only %d functions: is the repository root right?", funcs)
	}
}
