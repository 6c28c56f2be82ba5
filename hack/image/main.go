// Command image builds svm's container image without a Docker daemon.
//
// It assembles the image from Go alone, with go-containerregistry, so that
// any machine with Go can build it, and image_test.go can build it and
// inspect the result on every test run:
//
//   - the image is FROM scratch: one layer holding /svm, a static binary
//     (CGO_ENABLED=0), and nothing else: no shell, no package manager;
//   - it runs as UID and GID 65532, the non-root user config/manager's
//     securityContext names (its namespace enforces the restricted Pod
//     Security Standard), with /svm as its entrypoint; svm needs no file
//     from the image, since it reads the API server's address, CA and token
//     from the pod's service account mount;
//   - the binary is stamped with --version and --commit (what `svm version`
//     prints), and the image carries them as OCI labels;
//   - the same inputs give the same image, byte for byte: the file's owner,
//     mode and time and the image's creation time are fixed (the time from
//     SOURCE_DATE_EPOCH, else the Unix epoch), and the build is -trimpath.
//
// The image is written as a tarball in `docker save`'s format, which docker
// load, podman load and crane push read, and with --oci-layout also as an
// OCI image layout directory (for skopeo, crane or a registry mirror).
//
//	go run ./hack/image --version v0.3.0 --commit 1a2b3c4 --output _output/svm-image.tar
//
// `make image` runs it with the version and commit from git.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	modulePath = "github.com/svm-project/svm"
	// cliPackage holds the variables -ldflags -X stamps.
	cliPackage = modulePath + "/internal/cli"
	svmPackage = modulePath + "/cmd/svm"

	// binaryPath is where the image holds svm, and its entrypoint.
	binaryPath = "/svm"
	// user is the non-root UID:GID svm runs as; config/manager's
	// securityContext names the same.
	user = "65532:65532"
)

// validStamp is what --version and --commit may hold: they are passed in
// -ldflags, where a space or a quote would change what is stamped.
var validStamp = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// options are the command's flags, checked.
type options struct {
	version   string
	commit    string
	arch      string
	output    string
	ociLayout string
	tag       name.Tag
	// created is the image's creation time and the time of its one file.
	created time.Time
}

// parseOptions reads the flags, and SOURCE_DATE_EPOCH through getenv. The
// flag package writes its usage to usage on -h and on a flag it does not
// know.
func parseOptions(args []string, getenv func(string) string, usage io.Writer) (options, error) {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(usage)
	var o options
	var tag string
	fs.StringVar(&o.version, "version", "dev", "the version stamped into svm (what `svm version` prints) and the image's label org.opencontainers.image.version")
	fs.StringVar(&o.commit, "commit", "", "the git commit stamped into svm and the label org.opencontainers.image.revision (empty: no label, and svm version shows the revision the go command recorded, if any)")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "the architecture to build for (linux/ARCH)")
	fs.StringVar(&o.output, "output", "", "where to write the image tarball (docker save format)")
	fs.StringVar(&o.ociLayout, "oci-layout", "", "also write the image into this OCI image layout directory")
	fs.StringVar(&tag, "tag", "", "the name docker load and podman load give the image (default svm:VERSION)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.output == "" {
		return options{}, errors.New("--output is required")
	}
	if !validStamp.MatchString(o.version) {
		return options{}, fmt.Errorf("--version %q: want letters, digits and ._+-", o.version)
	}
	if o.commit != "" && !validStamp.MatchString(o.commit) {
		return options{}, fmt.Errorf("--commit %q: want letters, digits and ._+-", o.commit)
	}
	if o.arch == "" {
		return options{}, errors.New("--arch is empty")
	}
	if tag == "" {
		tag = "svm:" + o.version
	}
	t, err := name.NewTag(tag)
	if err != nil {
		return options{}, fmt.Errorf("--tag %q (set it when the version is not a valid image tag): %w", tag, err)
	}
	o.tag = t
	o.created = time.Unix(0, 0).UTC()
	if epoch := getenv("SOURCE_DATE_EPOCH"); epoch != "" {
		sec, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil || sec < 0 {
			return options{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a number of seconds since 1970", epoch)
		}
		o.created = time.Unix(sec, 0).UTC()
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, os.Getenv, stderr)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "svm-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	binary, err := buildSVM(ctx, o, work)
	if err != nil {
		return err
	}
	content, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	img, err := assemble(content, o)
	if err != nil {
		return err
	}
	if err := writeTarball(img, o.tag, o.output); err != nil {
		return err
	}
	if o.ociLayout != "" {
		if err := writeLayout(img, o.tag, o.ociLayout); err != nil {
			return err
		}
	}
	// The config's digest is what docker and podman show as the image ID;
	// the manifest's changes with the format the image is stored in.
	id, err := img.ConfigName()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (linux/%s, image ID %s) to %s\n", o.tag, o.arch, id, o.output)
	return nil
}

// buildSVM builds a static svm for linux/o.arch into dir and returns its
// path. The package is named by import path, so the build works from any
// directory of svm's module (make runs it from the top, go test from
// hack/image).
func buildSVM(ctx context.Context, o options, dir string) (string, error) {
	ldflags := "-s -w -X " + cliPackage + ".Version=" + o.version
	if o.commit != "" {
		ldflags += " -X " + cliPackage + ".Commit=" + o.commit
	}
	binary := filepath.Join(dir, "svm")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", binary, svmPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.arch)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building svm for linux/%s: %w\n%s", o.arch, err, stderr.Bytes())
	}
	return binary, nil
}

// assemble builds the image around svm's binary. It reads no clock and no
// file, so that the same binary and options give the same image digest.
func assemble(binary []byte, o options) (v1.Image, error) {
	layer, err := binaryLayer(binary, o.created)
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: o.created},
			CreatedBy: "hack/image: " + binaryPath + ", a static build of " + svmPackage,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("adding svm's layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = o.arch
	cf.Created = v1.Time{Time: o.created}
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{binaryPath},
		WorkingDir: "/",
		Labels:     labels(o),
	}
	return mutate.ConfigFile(img, cf)
}

// labels are the OCI annotations
// (https://github.com/opencontainers/image-spec/blob/main/annotations.md)
// that tell what the image holds and where it came from.
func labels(o options) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "svm",
		"org.opencontainers.image.description": "svm, a Kubernetes storage version migrator",
		"org.opencontainers.image.source":      "https://" + modulePath,
		"org.opencontainers.image.version":     o.version,
	}
	if o.commit != "" {
		l["org.opencontainers.image.revision"] = o.commit
	}
	return l
}

// binaryLayer is a gzipped tar layer holding the binary as /svm: owned by
// root so that the non-root user cannot replace it, executable by all.
func binaryLayer(binary []byte, modTime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(binaryPath, "/"),
		Mode:     0o755,
		Uid:      0,
		Gid:      0,
		Size:     int64(len(binary)),
		ModTime:  modTime,
		Format:   tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(binary); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	content := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(content)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// writeTarball writes img to path through a temporary file, so that a
// failed or interrupted run leaves no half-written image behind.
func writeTarball(img v1.Image, tag name.Tag, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".svm-image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := tarball.Write(tag, img, f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// CreateTemp makes the file private; an image tarball is not secret.
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// writeLayout writes img into an OCI image layout at dir, as its only
// image, named by the tag's identifier as skopeo's oci:DIR:TAG expects.
func writeLayout(img v1.Image, tag name.Tag, dir string) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing OCI layout %s: %w", dir, err)
	}
	annotations := map[string]string{"org.opencontainers.image.ref.name": tag.TagStr()}
	if err := p.AppendImage(img, layout.WithAnnotations(annotations)); err != nil {
		return fmt.Errorf("writing OCI layout %s: %w", dir, err)
	}
	return nil
}
