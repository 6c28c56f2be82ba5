package framework

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svm-project/svm/test/controlplane"
)

var (
	buildOnce sync.Once
	svmBinary string
	buildErr  error
)

// SVMBinary builds cmd/svm once per test process and returns its path.
// It builds as the image does (hack/image: static, -trimpath), so that the
// tests run the binary as it ships, and the image's build finds every
// package compiled already.
//
// Every test process (one per package) builds, the build cache making all
// but the first little more than a link, into a file of its own in
// _output/test-bin that it then renames over the shared svm there: one
// binary on disk however many packages run, and a process that started the
// previous one keeps running it.
func SVMBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir := filepath.Join(RepoRoot(), "_output", "test-bin")
		if buildErr = os.MkdirAll(dir, 0o755); buildErr != nil {
			return
		}
		own, err := os.CreateTemp(dir, ".svm-*")
		if err != nil {
			buildErr = err
			return
		}
		own.Close()
		defer os.Remove(own.Name()) // gone already once renamed
		cmd := exec.Command("go", "build", "-trimpath", "-o", own.Name(), "./cmd/svm")
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = &buildError{out: out, err: err}
			return
		}
		svmBinary = filepath.Join(dir, "svm")
		buildErr = os.Rename(own.Name(), svmBinary)
	})
	if buildErr != nil {
		t.Fatalf("build svm: %v", buildErr)
	}
	return svmBinary
}

type buildError struct {
	out []byte
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + string(e.out) }

// Process is a running svm process whose output goes to a log file.
type Process struct {
	cmd     *exec.Cmd
	LogPath string
	exited  chan struct{}
}

// StartSVM runs the svm binary with args, against env's API server, until
// the test ends or the process is stopped or killed.
func (e *Env) StartSVM(t testing.TB, args ...string) *Process {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := e.CP.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return startSVM(t, kubeconfig, args)
}

// StartSVMWithEnv is StartSVM with env (KEY=value) added to svm's
// environment, for svm's test hooks (kubeclients.SkewEnv).
func (e *Env) StartSVMWithEnv(t testing.TB, env []string, args ...string) *Process {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := e.CP.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return startSVMWithEnv(t, kubeconfig, args, env)
}

func startSVM(t testing.TB, kubeconfig string, args []string) *Process {
	t.Helper()
	return startSVMWithEnv(t, kubeconfig, args, nil)
}

func startSVMWithEnv(t testing.TB, kubeconfig string, args, env []string) *Process {
	t.Helper()
	bin := SVMBinary(t)
	logFile, err := os.CreateTemp(t.TempDir(), "svm-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append(args, "--kubeconfig", kubeconfig)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A test that fails while svm runs asks it for its goroutines
	// (SIGQUIT): all of them, so that a stall shows where it waits.
	cmd.Env = append(append(os.Environ(), "GOTRACEBACK=all"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start svm: %v", err)
	}
	p := &Process{cmd: cmd, LogPath: logFile.Name(), exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if !t.Failed() {
			p.Kill()
			return
		}
		dumped := p.Running() && p.quit(10*time.Second)
		p.Kill()
		data, _ := os.ReadFile(p.LogPath)
		log, stacks := splitGoroutineDump(data)
		t.Logf("svm log:\n%s", tail(log, 60))
		if dumped {
			t.Logf("svm's goroutines in its own code when the test failed:\n%s", summarizeGoroutines(stacks, modulePath))
		}
		controlplane.KeepArtifact(t, filepath.Base(p.LogPath), p.LogPath)
	})
	return p
}

// quit asks the process for its goroutines and to exit (SIGQUIT), and
// reports whether it exited within timeout.
func (p *Process) quit(timeout time.Duration) bool {
	if err := p.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		return false
	}
	select {
	case <-p.exited:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Kill kills the process with SIGKILL and waits for it to exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Stop sends SIGTERM and waits up to timeout for the process to exit; it
// reports whether it exited in time.
func (p *Process) Stop(timeout time.Duration) bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Pause stops the process (SIGSTOP) until Resume: svm then sees nothing
// of what happens meanwhile, as when it is down or between two of its
// looks, but keeps its state.
func (p *Process) Pause(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("pause svm: %v", err)
	}
}

// Resume continues a paused process (SIGCONT).
func (p *Process) Resume(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("resume svm: %v", err)
	}
}

// ExitCode is the process's exit code once it has exited.
func (p *Process) ExitCode() int {
	<-p.exited
	return p.cmd.ProcessState.ExitCode()
}

// Log returns what the process has written so far.
func (p *Process) Log(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func tail(data []byte, lines int) string {
	all := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return string(bytes.Join(all, []byte("\n")))
}

// ServerRequests is the API server's own count of requests with verb
// (PATCH, LIST, ...) to resource, from its metrics: what really arrived,
// whatever the clients believe they sent.
func (e *Env) ServerRequests(t testing.TB, verb, resource string) int {
	t.Helper()
	return int(e.sumServerMetric(t, "apiserver_request_total", func(line string) bool {
		return strings.Contains(line, `resource="`+resource+`"`) && strings.Contains(line, `verb="`+verb+`"`) &&
			(!strings.Contains(line, `subresource="`) || strings.Contains(line, `subresource=""`))
	}))
}

// ServerWrites is the API server's own count of svm's kinds of write to
// resource: PUT (an object rewritten as listed) and PATCH (its
// managedFields moved off a retired version).
func (e *Env) ServerWrites(t testing.TB, resource string) int {
	t.Helper()
	return e.ServerRequests(t, "PUT", resource) + e.ServerRequests(t, "PATCH", resource)
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}
