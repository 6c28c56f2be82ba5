package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/svm-project/svm/test/node"
)

// buildPauseImage builds hack/e2e/pause into an image tagged
// node.PauseImage, written as a tarball to out: the node pulls nothing.
func buildPauseImage(ctx context.Context, work, out string) error {
	binary := filepath.Join(work, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", binary, "github.com/svm-project/svm/hack/e2e/pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build pause: %w\n%s", err, output)
	}
	content, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: "pause", Mode: 0o755, Size: int64(len(content)), ModTime: time.Unix(0, 0)}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := tw.Write(content); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		return err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tag, err := name.NewTag(node.PauseImage)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, tag, img)
}
