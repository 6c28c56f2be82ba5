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

// TestDevelopmentNamesTheBuiltReleases: the releases docs/development.md
// says the first run builds are the ones the Makefile and hack/tools
// build.
func TestDevelopmentNamesTheBuiltReleases(t *testing.T) {
	read := func(path string) string {
		data, err := os.ReadFile(filepath.Join(repoRoot(), path))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	dev, makefile, tools := read("docs/development.md"), read("Makefile"), read("hack/tools/go.mod")
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(KUBE_MATRIX|KUBE_VERSION) := (.*)$`).FindAllStringSubmatch(makefile, -1) {
		vars[m[1]] = strings.TrimSpace(m[2])
	}
	etcd := regexp.MustCompile(`(?m)^\s*go\.etcd\.io/etcd/server/v3 (v\S+)`).FindStringSubmatch(tools)
	if vars["KUBE_VERSION"] == "" || vars["KUBE_MATRIX"] == "" || etcd == nil {
		t.Fatalf("the Makefile's KUBE_VERSION (%q) and KUBE_MATRIX (%q), or hack/tools' etcd (%v), are not where this test reads them", vars["KUBE_VERSION"], vars["KUBE_MATRIX"], etcd)
	}
	var others []string
	for _, v := range strings.Fields(vars["KUBE_MATRIX"]) {
		if v != "$(KUBE_VERSION)" && v != vars["KUBE_VERSION"] {
			others = append(others, v)
		}
	}
	for _, c := range []struct{ what, pattern, want string }{
		{"kube-apiserver", `kube-apiserver (v[\d.]+)`, vars["KUBE_VERSION"]},
		{"kube-controller-manager", `kube-controller-manager (v[\d.]+)`, vars["KUBE_VERSION"]},
		{"etcd", `etcd (v[\d.]+)`, etcd[1]},
		{"the matrix", "`make matrix`: (v[\\d.]+\\d(?:, v[\\d.]+\\d)*)", strings.Join(others, ", ")},
	} {
		ms := regexp.MustCompile(c.pattern).FindAllStringSubmatch(dev, -1)
		if len(ms) == 0 {
			t.Errorf("docs/development.md names no release of %s (/%s/)", c.what, c.pattern)
		}
		for _, m := range ms {
			if m[1] != c.want {
				t.Errorf("docs/development.md says the first run builds %s %s; the build's is %s", c.what, m[1], c.want)
			}
		}
	}
}
