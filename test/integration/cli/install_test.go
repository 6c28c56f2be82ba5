package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svm-project/svm/test/framework"
)

// The README's install commands from a checkout, as printed there; the
// tests below run exactly these, so a change to one is a change to both.
const (
	readmeInstall = "go install ./cmd/svm"
	readmePlugin  = "go build -o ~/bin/kubectl-svm ./cmd/svm"
)

// installAsPrinted runs command, one of the README's install commands, as
// a user would in a checkout of svm: in the repository's root, by a shell,
// with a home and GOBIN of the test's own. The module and build caches are
// the machine's, and the module proxy is off: a checkout that has its
// modules installs without the network. It returns the home directory.
func installAsPrinted(t *testing.T, command string) (home, gobin string) {
	t.Helper()
	readme := string(framework.MustReadFile(t, filepath.Join(framework.RepoRoot(), "README.md")))
	if !strings.Contains(readme, command) {
		t.Fatalf("README.md no longer prints %q: change this test with it", command)
	}
	home = t.TempDir()
	gobin = filepath.Join(home, "gobin")
	// A user who installs to ~/bin has it; go build -o does not create it.
	if err := os.Mkdir(filepath.Join(home, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "GOBIN=" + gobin, "GOPROXY=off", "GOFLAGS="}
	for _, name := range []string{"GOPATH", "GOCACHE", "GOMODCACHE"} {
		out, err := exec.Command("go", "env", name).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", name, err)
		}
		env = append(env, name+"="+strings.TrimSpace(string(out)))
	}
	cmd := exec.CommandContext(framework.Context(t, 5*time.Minute), "sh", "-c", command)
	cmd.Dir = framework.RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}
	return home, gobin
}

// expectVersion runs the program at path with `version` and checks that it
// is svm saying which version it is.
func expectVersion(t *testing.T, path string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(framework.Context(t, time.Minute), path, "version")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s version: %v\n%s", path, err, stderr.String())
	}
	if out := stdout.String(); !strings.HasPrefix(out, "svm ") || !strings.Contains(out, "(commit ") || strings.Count(out, "\n") != 1 {
		t.Errorf("%s version printed %q: want one line, svm <version> (commit <commit>, ...)", path, out)
	}
}

// TestInstallFromCheckoutAsPrinted runs the README's `go install` in the
// checkout: it puts a working svm in $GOBIN.
func TestInstallFromCheckoutAsPrinted(t *testing.T) {
	t.Parallel()
	_, gobin := installAsPrinted(t, readmeInstall)
	expectVersion(t, filepath.Join(gobin, "svm"))
}
