package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// Releases other than the default build are kept in the binary directory
// under versioned names, kube-apiserver-v1.35.4 and
// kube-controller-manager-v1.35.4 (make matrix builds them), so that every
// supported minor can run on one machine and a cluster can be upgraded by
// restarting a server on another binary.

// binaryFor is the path of program (kube-apiserver or
// kube-controller-manager) of release in binDir: the default build when
// release is empty.
func binaryFor(binDir, program, release string) string {
	if release == "" {
		return filepath.Join(binDir, program)
	}
	return filepath.Join(binDir, program+"-"+release)
}

// ResolveRelease finds the release of kube-apiserver in binDir that want
// names: a whole release (v1.35.4) or a minor (1.35 or v1.35), of which the
// newest patch built is taken. An empty want is the default build and
// resolves to "".
func ResolveRelease(binDir, want string) (string, error) {
	if want == "" {
		return "", nil
	}
	wanted, err := version.ParseGeneric(want)
	if err != nil {
		return "", fmt.Errorf("Kubernetes release %q: %w", want, err)
	}
	wholeRelease := strings.Count(strings.TrimPrefix(want, "v"), ".") == 2
	matches, err := filepath.Glob(filepath.Join(binDir, "kube-apiserver-v*"))
	if err != nil {
		return "", err
	}
	var best *version.Version
	for _, m := range matches {
		v, err := version.ParseSemantic(strings.TrimPrefix(filepath.Base(m), "kube-apiserver-"))
		if err != nil || v.Major() != wanted.Major() || v.Minor() != wanted.Minor() {
			continue
		}
		if wholeRelease && v.Patch() != wanted.Patch() {
			continue
		}
		if fi, err := os.Stat(m); err != nil || fi.IsDir() {
			continue
		}
		if best == nil || v.GreaterThan(best) {
			best = v
		}
	}
	if best == nil {
		return "", fmt.Errorf("%s has no kube-apiserver of Kubernetes %s; run 'make matrix'", binDir, want)
	}
	return "v" + best.String(), nil
}
