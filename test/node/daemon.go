package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// daemon is one long-running child of the node: containerd, the kubelet,
// kube-scheduler.
type daemon struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// startDaemon starts path with args, its output appended to logPath; the
// child dies with the test process.
func startDaemon(name, path, logPath string, args ...string) (*daemon, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(d.exited)
	}()
	return d, nil
}

// stop sends SIGTERM and waits up to grace, then kills.
func (d *daemon) stop(grace time.Duration) error {
	if d == nil {
		return nil
	}
	select {
	case <-d.exited:
		return nil
	default:
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", d.name, err)
	}
	select {
	case <-d.exited:
		return nil
	case <-time.After(grace):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("%s did not stop within %s and was killed", d.name, grace)
	}
}

// alive reports whether the daemon still runs.
func (d *daemon) alive() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}
