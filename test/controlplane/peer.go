package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// Peer is a second kube-apiserver on the control plane's etcd, as in a
// highly available control plane: the same data, credentials and serving
// certificate, its own port, flags and log.
type Peer struct {
	// URL is the peer's https URL.
	URL string

	cp      *ControlPlane
	process *process
}

// StartPeer starts another kube-apiserver on the control plane's etcd with
// the base flags and flags (which may differ from the first server's, as
// during a rolling upgrade), and waits until it is ready. A flag in flags
// replaces the base flag of the same name (`--etcd-servers` through a
// proxy, say), rather than adding to it as a list flag would. name is its
// hostname, so that it has an identity of its own (the program must call
// RunHostnameHelper), and tells its log apart. Stop it with Peer.Stop;
// Stop of the control plane does not.
func (cp *ControlPlane) StartPeer(ctx context.Context, name string, flags ...string) (*Peer, error) {
	ports, err := cp.freePorts(1)
	if err != nil {
		return nil, err
	}
	url := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	args := slices.DeleteFunc(slices.Clone(cp.baseFlags), func(f string) bool {
		if strings.HasPrefix(f, "--secure-port=") || strings.HasPrefix(f, "--cert-dir=") {
			return true
		}
		return slices.ContainsFunc(flags, func(g string) bool { return flagName(g) == flagName(f) })
	})
	args = append(args, "--secure-port="+strconv.Itoa(ports[0]), "--cert-dir="+cp.path(name+"-certs"))
	args = append(args, flags...)
	p := &Peer{URL: url, cp: cp, process: &process{
		name:     "kube-apiserver " + name,
		path:     binaryFor(cp.binDir, "kube-apiserver", cp.Release()),
		logPath:  cp.path("kube-apiserver-" + name + ".log"),
		args:     args,
		hostname: name,
	}}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// flagName is the name of a flag written --name=value.
func flagName(flag string) string {
	name, _, _ := strings.Cut(flag, "=")
	return name
}

func (p *Peer) start(ctx context.Context) error {
	if err := p.process.start(); err != nil {
		return err
	}
	client, err := rest.HTTPClientFor(p.RESTConfig())
	if err != nil {
		_ = p.Stop()
		return fmt.Errorf("build readiness client: %w", err)
	}
	if err := p.process.waitReady(ctx, p.cp.startTimeout, func(ctx context.Context) error {
		return httpOK(ctx, client, p.URL+"/readyz")
	}); err != nil {
		_ = p.Stop()
		return err
	}
	return nil
}

// Upgrade stops the peer gracefully and starts it again, on the same port
// and flags, with the kube-apiserver of release (see Options.Release), as
// one step of a rolling upgrade.
func (p *Peer) Upgrade(ctx context.Context, release string) error {
	resolved, err := ResolveRelease(p.cp.binDir, release)
	if err != nil {
		return err
	}
	if err := p.Stop(); err != nil {
		return err
	}
	p.process.path = binaryFor(p.cp.binDir, "kube-apiserver", resolved)
	return p.start(ctx)
}

// RESTConfig is an admin client configuration for the peer.
func (p *Peer) RESTConfig() *rest.Config {
	cfg := p.cp.RESTConfig()
	cfg.Host = p.URL
	return cfg
}

// Stop stops the peer gracefully (SIGTERM).
func (p *Peer) Stop() error { return p.process.stop(syscall.SIGTERM, 30*time.Second) }

// Pause stops the peer (SIGSTOP) without ending it: it answers nothing and
// observes nothing until Resume, as a server stalled or cut off for a
// while, and then catches up.
func (p *Peer) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume lets a paused peer run again (SIGCONT).
func (p *Peer) Resume() error { return p.signal(syscall.SIGCONT) }

func (p *Peer) signal(sig syscall.Signal) error {
	pid := p.process.pid()
	if pid == 0 {
		return fmt.Errorf("%s is not running", p.process.name)
	}
	return syscall.Kill(pid, sig)
}
