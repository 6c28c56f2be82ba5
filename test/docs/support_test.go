package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/svm-project/svm/test/framework"
)

// TestSupportTableIsTheMatrix: README's support table has a row for
// exactly the minors the matrix tests run (framework.SupportedMinors), and
// the Makefile's KUBE_MATRIX builds a release of each of them, so that the
// table says only what the tests show.
func TestSupportTableIsTheMatrix(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, m := range regexp.MustCompile(`(?m)^\| (1\.\d+) \|`).FindAllSubmatch(readme, -1) {
		rows = append(rows, string(m[1]))
	}
	if !slices.Equal(rows, framework.SupportedMinors) {
		t.Errorf("README's support table has rows %v, the matrix tests run %v", rows, framework.SupportedMinors)
	}

	makefile, err := os.ReadFile(filepath.Join(repoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(KUBE_MATRIX|KUBE_VERSION) := (.*)$`).FindAllSubmatch(makefile, -1) {
		vars[string(m[1])] = string(m[2])
	}
	var minors []string
	for _, v := range strings.Fields(strings.ReplaceAll(vars["KUBE_MATRIX"], "$(KUBE_VERSION)", vars["KUBE_VERSION"])) {
		parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
		if len(parts) != 3 {
			t.Fatalf("KUBE_MATRIX release %q is not vMAJOR.MINOR.PATCH", v)
		}
		minors = append(minors, parts[0]+"."+parts[1])
	}
	if !slices.Equal(minors, framework.SupportedMinors) {
		t.Errorf("the Makefile's KUBE_MATRIX builds the minors %v, the matrix tests run %v", minors, framework.SupportedMinors)
	}
}
