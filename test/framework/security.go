package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// StartSVMWithKubeconfig runs the svm binary with args against the cluster
// and credentials of kubeconfig (see Env.StartSVM, which uses the admin's),
// so that a test can run svm as a less privileged identity.
func StartSVMWithKubeconfig(t testing.TB, kubeconfig string, args ...string) *Process {
	t.Helper()
	return startSVM(t, kubeconfig, args)
}

// RunSVM runs the svm binary with args and the given kubeconfig to its end
// (at most timeout) and returns its exit code and everything it printed.
// Unlike calling the CLI in the test process, this captures svm's logs too.
func RunSVM(t testing.TB, kubeconfig string, timeout time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return RunSVMWithEnv(t, nil, kubeconfig, timeout, args...)
}

// RunSVMWithEnv is RunSVM with env (KEY=value) added to svm's
// environment, for svm's test hooks (kubeclients.SkewEnv).
func RunSVMWithEnv(t testing.TB, env []string, kubeconfig string, timeout time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	bin := SVMBinary(t) // the first call builds svm: not part of the run's time
	ctx := Context(t, timeout)
	cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", kubeconfig)...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("svm %v did not finish within %s\nstdout:\n%s\nstderr:\n%s", args, timeout, out.String(), errOut.String())
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	default:
		t.Fatalf("run svm %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// ServiceAccountKubeconfig asks the TokenRequest API for a short-lived token
// of the ServiceAccount namespace/name (which must exist) and writes a
// kubeconfig that authenticates with it to e's API server. The API server
// then authorizes every request as that ServiceAccount, with exactly the
// RBAC bound to it.
func (e *Env) ServiceAccountKubeconfig(t testing.TB, namespace, name string) string {
	t.Helper()
	ttl := int64(time.Hour / time.Second)
	tr, err := e.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(Context(t, time.Minute), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("request a token for service account %s/%s: %v", namespace, name, err)
	}
	// The admin's kubeconfig names the server and its CA; only the
	// credentials change.
	cfg := e.CP.Kubeconfig()
	for _, auth := range cfg.AuthInfos {
		auth.Token = tr.Status.Token
	}
	path := filepath.Join(t.TempDir(), "kubeconfig-"+namespace+"-"+name)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	return path
}

// RenderManifests renders the kustomization in dir (relative to the
// repository root) with `kubectl kustomize`, as `kubectl apply -k` would.
func (e *Env) RenderManifests(t testing.TB, dir string) []byte {
	t.Helper()
	out, stderr, err := e.Kubectl(t, nil, "kustomize", filepath.Join(RepoRoot(), dir))
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr)
	}
	return []byte(out)
}

// ApplyManifests applies rendered manifests for real with a server-side
// apply, as an operator installing svm would.
func (e *Env) ApplyManifests(t testing.TB, rendered []byte) {
	t.Helper()
	out, stderr, err := e.Kubectl(t, rendered, "apply", "--server-side", "--field-manager=svm-install", "-f", "-")
	if err != nil {
		t.Fatalf("kubectl apply: %v\n%s%s", err, out, stderr)
	}
}

// AuditLog records, at the Metadata level (who, what, which object, which
// answer; never bodies), every request that a ServiceAccount sends to the
// API server, so that a test can count exactly what svm sent under its
// ServiceAccount and how the server answered.
type AuditLog struct {
	// Flags configure kube-apiserver to write the log.
	Flags []string
	path  string
}

// NewAuditLog writes an audit policy into dir and returns the log it
// configures.
func NewAuditLog(t testing.TB, dir string) *AuditLog {
	t.Helper()
	policy := filepath.Join(dir, "audit-policy.yaml")
	const rules = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n" +
		"- level: Metadata\n  userGroups: [system:serviceaccounts]\n- level: None\n"
	if err := os.WriteFile(policy, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "audit.log")
	return &AuditLog{path: path, Flags: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + path}}
}

// AuditEvent is one request in the audit log.
type AuditEvent struct {
	AuditID string `json:"auditID"`
	Stage   string `json:"stage"`
	Verb    string `json:"verb"`
	URI     string `json:"requestURI"`
	User    struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// Code is the HTTP status the API server answered with, 0 if none yet.
func (ev AuditEvent) Code() int {
	if ev.ResponseStatus == nil {
		return 0
	}
	return ev.ResponseStatus.Code
}

// Resource is "resource.group/subresource" of the request, or its URI when
// it names no object (discovery).
func (ev AuditEvent) Resource() string {
	if ev.ObjectRef == nil || ev.ObjectRef.Resource == "" {
		return ev.URI
	}
	r := ev.ObjectRef.Resource
	if ev.ObjectRef.APIGroup != "" {
		r += "." + ev.ObjectRef.APIGroup
	}
	if ev.ObjectRef.Subresource != "" {
		r += "/" + ev.ObjectRef.Subresource
	}
	return r
}

// Requests returns every request user sent so far, once each (a watch is
// logged when it starts and again when it ends).
func (a *AuditLog) Requests(t testing.TB, user string) []AuditEvent {
	t.Helper()
	data, err := os.ReadFile(a.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []AuditEvent
	seen := map[string]bool{}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev AuditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			// The API server may be writing the last line right now.
			continue
		}
		if ev.User.Username != user || seen[ev.AuditID] {
			continue
		}
		seen[ev.AuditID] = true
		out = append(out, ev)
	}
	return out
}

// ServiceAccountUser is the user name a ServiceAccount's token
// authenticates as.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// WaitFor polls cond every 200ms until it holds or timeout passes, and
// reports whether it held.
func WaitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return true
}

// OneLine reports whether s is a single non-empty line (a trailing newline
// allowed): what a user should see when svm refuses to work.
func OneLine(s string) bool {
	s = strings.TrimSuffix(s, "\n")
	return s != "" && !strings.Contains(s, "\n")
}
