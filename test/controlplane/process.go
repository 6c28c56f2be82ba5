package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is one long-running child: etcd or kube-apiserver. It can be
// started again after it stops, with the same arguments.
type process struct {
	name    string
	path    string
	args    []string
	logPath string
	// hostname, if set, runs the process in a UTS namespace of its own
	// under this hostname (see RunHostnameHelper).
	hostname string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running", p.name)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open %s log: %w", p.name, err)
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// The child dies with us: a test binary killed on timeout must not leave
	// servers behind holding ports and data directories.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if p.hostname != "" {
		if err := withHostname(cmd, p.hostname); err != nil {
			logFile.Close()
			return fmt.Errorf("start %s: %w", p.name, err)
		}
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	return nil
}

// running reports whether the process has been started and not yet exited.
func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// pid is the process id of the current run, or 0.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// stop sends sig and waits for the process to exit; after grace it kills it.
func (p *process) stop(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd, p.exited = nil, nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	<-exited
	return nil
}

// waitExited returns a channel closed when the current run exits, or nil.
func (p *process) waitExited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// waitReady polls ready until it returns nil, the process exits, or ctx ends.
func (p *process) waitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	exited := p.waitExited()
	var lastErr error
	for {
		if lastErr = ready(ctx); lastErr == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited before it was ready; the end of %s:\n%s", p.name, p.logPath, p.logTail(2048))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (last error: %v); see %s", p.name, timeout, lastErr, p.logPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logTail returns at most the last limit bytes of the process's log, from a
// line's start: why a server exited, for an error that must say it after
// the control plane's directory, log included, is removed.
func (p *process) logTail(limit int64) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	offset := max(info.Size()-limit, 0)
	tail, err := io.ReadAll(io.NewSectionReader(f, offset, info.Size()-offset))
	if err != nil {
		return err.Error()
	}
	if i := bytes.IndexByte(tail, '\n'); offset > 0 && i >= 0 {
		tail = tail[i+1:]
	}
	return string(tail)
}
