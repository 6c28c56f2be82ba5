package badinput_test

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/svm-project/svm/test/framework"
)

// unusableConnection runs `svm migrate`, `svm controller` and `svm status`
// against servers and credentials that cannot work. Each exits 1 at once
// with exactly one line on stderr, "svm: " and what is wrong in the words
// of the failing layer (no stack, no client-go log lines), and nothing on
// stdout; and each gives up after a bounded number of attempts.
func (s *suite) unusableConnection(t *testing.T) {
	env := s.env
	dir := t.TempDir()
	write := func(name string, edit func(*clientcmdapi.Config)) string {
		cfg := env.CP.Kubeconfig()
		for _, c := range cfg.Clusters {
			*c = *c.DeepCopy()
		}
		for _, a := range cfg.AuthInfos {
			*a = *a.DeepCopy()
		}
		edit(cfg)
		path := filepath.Join(dir, name)
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	setServer := func(server string) func(*clientcmdapi.Config) {
		return func(cfg *clientcmdapi.Config) {
			for _, c := range cfg.Clusters {
				c.Server = server
			}
		}
	}
	valid := write("valid", func(*clientcmdapi.Config) {})
	refused := write("refused", setServer("https://"+framework.FreeAddress(t)))
	hangUp, accepted := hangingUpServer(t)
	hangsUp := write("hangs-up", setServer("https://"+hangUp))
	otherCA, _, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	unknownCA := write("unknown-ca", func(cfg *clientcmdapi.Config) {
		for _, c := range cfg.Clusters {
			c.CertificateAuthorityData = otherCA
		}
	})
	// A revoked or expired token looks the same to a client: 401.
	rejected := write("rejected-token", func(cfg *clientcmdapi.Config) {
		for _, a := range cfg.AuthInfos {
			a.Token = "expired-or-revoked"
		}
	})
	malformed := filepath.Join(dir, "malformed")
	if err := os.WriteFile(malformed, []byte("apiVersion: v1\nkind: Config\nclusters: [oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	commands := map[string][]string{
		"migrate": {"migrate", "secrets"},
		"controller": {"controller", "--trigger=false", "--leader-elect=false",
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0"},
		"status": {"status"},
	}
	tests := []struct {
		name       string
		kubeconfig string
		extra      []string
		// want is in every command's line; "a|b" accepts either.
		want string
		// requests bounds the connections (hangs up) or failed
		// authentications (rejected token) of each command.
		requests func() int
		bound    int
	}{
		{name: "connection refused", kubeconfig: refused, want: "connect: connection refused"},
		// Whether the client reads an EOF or a reset depends on when the
		// close reaches it.
		{name: "server hangs up", kubeconfig: hangsUp, want: "EOF|connection reset by peer", requests: func() int { return int(accepted.Load()) }, bound: 11},
		{name: "unknown certificate authority", kubeconfig: unknownCA, want: "x509: certificate signed by unknown authority"},
		{name: "rejected token", kubeconfig: rejected, want: "", bound: 2, requests: func() int {
			return int(env.ServerMetric(t, "authentication_attempts", `result="error"`))
		}},
		{name: "malformed kubeconfig", kubeconfig: malformed, want: "load kubeconfig: error loading config file"},
		{name: "missing context", kubeconfig: valid, extra: []string{"--context", "nope"}, want: `load kubeconfig: context "nope" does not exist`},
	}
	checked := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := 0
			if tt.requests != nil {
				start = tt.requests()
			}
			var wg sync.WaitGroup
			for command, args := range commands {
				wg.Go(func() {
					began := time.Now()
					code, stdout, stderr := framework.RunSVM(t, tt.kubeconfig, time.Minute, append(args, tt.extra...)...)
					took := time.Since(began)
					if code != 1 || stdout != "" || !framework.OneLine(stderr) || !strings.HasPrefix(stderr, "svm: ") || !containsAny(stderr, tt.want) {
						t.Errorf("svm %s: exit code %d, stdout %q, stderr %q; want 1, nothing, and one line starting %q that says %q", command, code, stdout, stderr, "svm: ", tt.want)
					}
					if tt.name == "rejected token" && !strings.Contains(stderr, "Unauthorized") && !strings.Contains(stderr, "provide credentials") {
						t.Errorf("svm %s: %q does not say the credentials were rejected", command, stderr)
					}
					if took > 30*time.Second {
						t.Errorf("svm %s took %s to give up", command, took.Round(time.Millisecond))
					}
					t.Logf("svm %s: %s", command, strings.TrimSpace(stderr))
				})
			}
			wg.Wait()
			if tt.requests != nil {
				if got := tt.requests() - start; got < len(commands) || got > len(commands)*tt.bound {
					t.Errorf("%d attempts for %d commands, want 1 to %d each", got, len(commands), tt.bound)
				}
			}
		})
		if !t.Failed() {
			checked++
		}
	}
	framework.Scenario{Name: "unusable server or credentials", Objects: 0, Writes: 0, Retries: -1, Verified: checked == len(tests) && !t.Failed()}.Report(t)
}

// containsAny reports whether s contains one of the |-separated wants.
func containsAny(s, wants string) bool {
	return slices.ContainsFunc(strings.Split(wants, "|"), func(want string) bool { return strings.Contains(s, want) })
}

// hangingUpServer listens on loopback and closes every connection at once,
// as a crashed or misrouted endpoint would, counting the connections.
func hangingUpServer(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conn.Close()
		}
	}()
	return ln.Addr().String(), &accepted
}
