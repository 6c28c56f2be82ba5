package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestMain(t *testing.T) {
	// As -ldflags -X stamps them.
	defer func(version, commit string) { Version, Commit = version, commit }(Version, Commit)
	Version, Commit = "v1.2.3", "1a2b3c4"
	toolchain := runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH
	tests := []struct {
		name             string
		args             []string
		wantCode         int
		wantOut, wantErr string
	}{
		{name: "version", args: []string{"version"}, wantOut: "svm v1.2.3 (commit 1a2b3c4, " + toolchain + ")\n"},
		{name: "unknown command", args: []string{"frobnicate"}, wantCode: 1, wantErr: "svm: unknown command \"frobnicate\""},
		{name: "extra argument", args: []string{"version", "x"}, wantCode: 1, wantErr: "svm: unknown command \"x\""},
		{name: "controller: endpoint not https", args: []string{"controller", "--apiserver-endpoints", "https://10.0.0.1:6443,http://10.0.0.2:6443"}, wantCode: 1,
			wantErr: "svm: --apiserver-endpoints: \"http://10.0.0.2:6443\" is not an https://host:port URL"},
		{name: "controller: no check interval", args: []string{"controller", "--encryption-check-interval", "0s"}, wantCode: 1,
			wantErr: "svm: --encryption-check-interval must be positive, got 0s"},
		{name: "controller: empty resource name", args: []string{"controller", "--encrypted-resources", "secrets,,configmaps"}, wantCode: 1,
			wantErr: "svm: --encrypted-resources has an empty name in \"secrets,,configmaps\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Main(tt.args, &out, &errOut); code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.wantCode, errOut.String())
			}
			if out.String() != tt.wantOut {
				t.Errorf("stdout %q, want %q", out.String(), tt.wantOut)
			}
			if !strings.HasPrefix(errOut.String(), tt.wantErr) {
				t.Errorf("stderr %q, want prefix %q", errOut.String(), tt.wantErr)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantCode int
		wantErr  string
	}{
		{name: "done", err: nil, wantCode: 0},
		{name: "a verdict", err: ExitError(ExitUnsafe), wantCode: ExitUnsafe},
		{name: "a verdict, wrapped", err: fmt.Errorf("scan: %w", ExitError(ExitUnknown)), wantCode: ExitUnknown},
		{name: "an error", err: errors.New("connect: refused"), wantCode: 1, wantErr: "svm: connect: refused\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var errOut bytes.Buffer
			if code := exitCode(tt.err, &errOut); code != tt.wantCode || errOut.String() != tt.wantErr {
				t.Errorf("exit code %d and stderr %q, want %d and %q", code, errOut.String(), tt.wantCode, tt.wantErr)
			}
		})
	}
}

// steps are options that record what runOptions calls, and fail where told.
type steps struct {
	called                   []string
	completeErr, validateErr error
}

func (s *steps) Complete() error { s.called = append(s.called, "complete"); return s.completeErr }
func (s *steps) Validate() error { s.called = append(s.called, "validate"); return s.validateErr }

func TestRunOptions(t *testing.T) {
	refused := errors.New("connect: refused")
	tests := []struct {
		name       string
		o          steps
		code       int
		runErr     error
		want       error
		wantCalled string
	}{
		{name: "done", wantCalled: "complete validate run"},
		{name: "a verdict", code: ExitUnsafe, want: ExitError(ExitUnsafe), wantCalled: "complete validate run"},
		{name: "run fails", code: ExitUnknown, runErr: refused, want: refused, wantCalled: "complete validate run"},
		{name: "complete fails", o: steps{completeErr: refused}, want: refused, wantCalled: "complete"},
		{name: "validate fails", o: steps{validateErr: refused}, want: refused, wantCalled: "complete validate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o
			runE := runOptions(&o, func(context.Context) (int, error) {
				o.called = append(o.called, "run")
				return tt.code, tt.runErr
			})
			cmd := &cobra.Command{}
			cmd.SetContext(context.Background())
			if err := runE(cmd, nil); err != tt.want {
				t.Errorf("error %v, want %v", err, tt.want)
			}
			if got := strings.Join(o.called, " "); got != tt.wantCalled {
				t.Errorf("called %q, want %q", got, tt.wantCalled)
			}
		})
	}
}

func TestVersionLine(t *testing.T) {
	toolchain := runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH
	checkout := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/svm-project/svm", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d"},
			{Key: "vcs.modified", Value: "false"},
		},
	}
	dirty := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/svm-project/svm", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	installed := &debug.BuildInfo{Main: debug.Module{Path: "github.com/svm-project/svm", Version: "v0.3.0"}}
	tests := []struct {
		name            string
		version, commit string
		info            *debug.BuildInfo
		want            string
	}{
		{name: "stamped", version: "v0.3.0", commit: "abc1234", info: checkout, want: "svm v0.3.0 (commit abc1234, " + toolchain + ")"},
		{name: "go build in a checkout", info: checkout, want: "svm dev (commit 1a2b3c4d5e6f, " + toolchain + ")"},
		{name: "go build in a changed checkout", info: dirty, want: "svm dev (commit 1a2b3c4d5e6f-dirty, " + toolchain + ")"},
		{name: "go install at a version", info: installed, want: "svm v0.3.0 (commit unknown, " + toolchain + ")"},
		{name: "version stamped, commit recorded", version: "v0.4.0-rc.1", info: checkout, want: "svm v0.4.0-rc.1 (commit 1a2b3c4d5e6f, " + toolchain + ")"},
		{name: "nothing to go on", want: "svm dev (commit unknown, " + toolchain + ")"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionLine(tt.version, tt.commit, tt.info); got != tt.want {
				t.Errorf("versionLine = %q, want %q", got, tt.want)
			}
		})
	}
}
