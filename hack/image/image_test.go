package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	testVersion = "v9.9.9-test"
	testCommit  = "abc1234"
	// testEpoch is 2026-01-01T00:00:00Z, as SOURCE_DATE_EPOCH.
	testEpoch = "1767225600"
)

// TestImage builds the image as `make image` does, reads it back from the
// tarball and checks what a cluster relies on: svm as the entrypoint, a
// non-root user, labels that say which version and commit it holds, one
// layer with only /svm, and that /svm is a static binary that reports the
// stamped version.
func TestImage(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", testEpoch)
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	tarPath := filepath.Join(dir, "out", "svm-image.tar")
	layoutDir := filepath.Join(dir, "oci")
	var stdout, stderr bytes.Buffer
	args := []string{"--version", testVersion, "--commit", testCommit, "--output", tarPath, "--oci-layout", layoutDir}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run %v: %v\nstderr: %s", args, err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "svm:"+testVersion) {
		t.Errorf("stdout %q does not name the tag svm:%s", stdout.String(), testVersion)
	}

	tag, err := name.NewTag("svm:" + testVersion)
	if err != nil {
		t.Fatal(err)
	}
	// Reading the image under its tag shows docker load would name it so.
	img, err := tarball.ImageFromPath(tarPath, &tag)
	if err != nil {
		t.Fatalf("reading %s as svm:%s: %v", tarPath, testVersion, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wantConfig := v1.Config{
		User:       "65532:65532",
		Entrypoint: []string{"/svm"},
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":       "svm",
			"org.opencontainers.image.description": "svm, a Kubernetes storage version migrator",
			"org.opencontainers.image.source":      "https://github.com/svm-project/svm",
			"org.opencontainers.image.version":     testVersion,
			"org.opencontainers.image.revision":    testCommit,
		},
	}
	if diff := cmp.Diff(wantConfig, cf.Config); diff != "" {
		t.Errorf("image config (-want +got):\n%s", diff)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !cf.Created.Equal(created) {
		t.Errorf("created %s, want %s from SOURCE_DATE_EPOCH", cf.Created, created)
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	binary := filepath.Join(dir, "svm")
	hdr := extractOnlyFile(t, layers[0], binary)
	wantHeader := tar.Header{Typeflag: tar.TypeReg, Name: "svm", Mode: 0o755, Uid: 0, Gid: 0, ModTime: created}
	gotHeader := tar.Header{Typeflag: hdr.Typeflag, Name: hdr.Name, Mode: hdr.Mode, Uid: hdr.Uid, Gid: hdr.Gid, ModTime: hdr.ModTime.UTC()}
	if diff := cmp.Diff(wantHeader, gotHeader); diff != "" {
		t.Errorf("the layer's file (-want +got):\n%s", diff)
	}

	expectStaticELF(t, binary)
	out, err := exec.Command(binary, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", binary, err, out)
	}
	wantVersion := "svm " + testVersion + " (commit " + testCommit + ", " + runtime.Version() + ", linux/" + runtime.GOARCH + ")\n"
	if string(out) != wantVersion {
		t.Errorf("svm version printed %q, want %q", out, wantVersion)
	}

	// The OCI layout holds the same image, with OCI media types, under
	// the version as its name; and assembling the same binary again gives
	// the same digest: nothing in the image depends on when it was built.
	content, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	o, err := parseOptions(args, os.Getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	again, err := assemble(content, o)
	if err != nil {
		t.Fatal(err)
	}
	expectLayout(t, layoutDir, again)
	configDigest, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	againConfig, err := again.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if configDigest != againConfig {
		t.Errorf("the tarball's config is %s, assembling the same binary again gives %s", configDigest, againConfig)
	}
}

// extractOnlyFile writes the layer's one file to path and returns its
// header; the test fails if the layer holds anything else.
func extractOnlyFile(t *testing.T, layer v1.Layer, path string) *tar.Header {
	t.Helper()
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	var first *tar.Header
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the layer: %v", err)
		}
		names = append(names, hdr.Name)
		if first != nil {
			continue
		}
		first = hdr
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"svm"}, names); diff != "" {
		t.Fatalf("the layer's files (-want +got):\n%s", diff)
	}
	return first
}

// elfMachines are the ELF machine types of the architectures svm's tests
// run on.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

// expectStaticELF checks that path is an executable for this machine that
// needs no dynamic loader and no shared library: the image has neither.
// (A dynamic section alone is no fault: a static position-independent
// binary, the default on some architectures, relocates itself with one.)
func expectStaticELF(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("/svm is not an ELF file: %v", err)
	}
	defer f.Close()
	if want, ok := elfMachines[runtime.GOARCH]; !ok {
		t.Errorf("no ELF machine known for %s: add it to elfMachines", runtime.GOARCH)
	} else if f.Machine != want {
		t.Errorf("/svm is built for %s, want %s", f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("/svm has a %s program header: it needs a dynamic loader", p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("/svm needs shared libraries %v (err %v), want none", libs, err)
	}
}

// expectLayout checks that the OCI layout at dir holds exactly want, named
// by the test version, with OCI media types throughout.
func expectLayout(t *testing.T, dir string, want v1.Image) {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("reading the OCI layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("the OCI layout holds %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	wantDigest, err := want.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != wantDigest {
		t.Errorf("the OCI layout holds %s, assembling the same binary again gives %s", desc.Digest, wantDigest)
	}
	if got := desc.Annotations["org.opencontainers.image.ref.name"]; got != testVersion {
		t.Errorf("the OCI layout names the image %q, want %q", got, testVersion)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	got := []types.MediaType{m.MediaType, m.Config.MediaType}
	for _, l := range m.Layers {
		got = append(got, l.MediaType)
	}
	if diff := cmp.Diff([]types.MediaType{types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer}, got); diff != "" {
		t.Errorf("media types of manifest, config and layers (-want +got):\n%s", diff)
	}
}

// TestParseOptions covers the flags without building anything.
func TestParseOptions(t *testing.T) {
	noEnv := func(string) string { return "" }
	tests := []struct {
		name        string
		args        []string
		epoch       string
		wantErr     string
		wantTag     string
		wantCreated time.Time
	}{
		{name: "defaults", args: []string{"--output", "x.tar"}, wantTag: "svm:dev", wantCreated: time.Unix(0, 0).UTC()},
		{name: "version names the tag", args: []string{"--output", "x.tar", "--version", "v1.2.3-4-gabcdef0-dirty"}, wantTag: "svm:v1.2.3-4-gabcdef0-dirty", wantCreated: time.Unix(0, 0).UTC()},
		{name: "explicit tag", args: []string{"--output", "x.tar", "--version", "v1.2.3+meta", "--tag", "registry.example.com/svm:v1.2.3"}, wantTag: "registry.example.com/svm:v1.2.3", wantCreated: time.Unix(0, 0).UTC()},
		{name: "SOURCE_DATE_EPOCH", args: []string{"--output", "x.tar"}, epoch: "1700000000", wantTag: "svm:dev", wantCreated: time.Unix(1700000000, 0).UTC()},
		{name: "no output", args: []string{"--version", "v1"}, wantErr: "--output is required"},
		{name: "space in version", args: []string{"--output", "x.tar", "--version", "v1 -X main.x=y"}, wantErr: "--version \"v1 -X main.x=y\""},
		{name: "quote in commit", args: []string{"--output", "x.tar", "--commit", `ab"c`}, wantErr: "--commit"},
		{name: "version not a tag", args: []string{"--output", "x.tar", "--version", "v1.2.3+meta"}, wantErr: "--tag \"svm:v1.2.3+meta\""},
		{name: "bad SOURCE_DATE_EPOCH", args: []string{"--output", "x.tar"}, epoch: "yesterday", wantErr: "SOURCE_DATE_EPOCH \"yesterday\""},
		{name: "extra argument", args: []string{"--output", "x.tar", "now"}, wantErr: "unexpected argument \"now\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := noEnv
			if tt.epoch != "" {
				getenv = func(k string) string {
					if k == "SOURCE_DATE_EPOCH" {
						return tt.epoch
					}
					return ""
				}
			}
			o, err := parseOptions(tt.args, getenv, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.tag.String() != tt.wantTag {
				t.Errorf("tag %q, want %q", o.tag.String(), tt.wantTag)
			}
			if !o.created.Equal(tt.wantCreated) {
				t.Errorf("created %s, want %s", o.created, tt.wantCreated)
			}
		})
	}
	if _, err := parseOptions([]string{"-h"}, noEnv, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: error %v, want flag.ErrHelp", err)
	}
}
