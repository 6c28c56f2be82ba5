package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// BinDirEnv names the environment variable that points at the directory
// holding the kube-apiserver and etcd binaries.
const BinDirEnv = "SVM_BIN_DIR"

// AdminUser is the user the admin token authenticates as; it is a member of
// system:masters.
const AdminUser = "svm-admin"

// Options configure a control plane.
type Options struct {
	// BinDir holds kube-apiserver and etcd, and kube-controller-manager
	// when it is to run. Empty means $SVM_BIN_DIR, or the nearest bin/
	// directory above the working directory that has kube-apiserver and
	// etcd.
	BinDir string
	// Dir holds certificates, credentials, etcd data and process logs. Empty
	// means a new temporary directory, removed by Stop.
	Dir string
	// APIServerFlags are extra kube-apiserver flags, such as
	// "--feature-gates=StorageVersionAPI=true" or
	// "--encryption-provider-config=/path". They can be changed between
	// restarts with SetAPIServerFlags.
	APIServerFlags []string
	// ControllerManager also starts kube-controller-manager once the API
	// server is ready, running Kubernetes' own storage version migrator
	// (see StartControllerManager). It is off by default because its
	// garbage collector watches every object, load that tests not about
	// the in-tree migrator need not carry.
	ControllerManager bool
	// ControllerManagerFlags are extra kube-controller-manager flags, such
	// as the feature gate that turns its migrator on before 1.37.
	ControllerManagerFlags []string
	// WithoutMigrator runs kube-controller-manager with its garbage
	// collector but not its storage version migrator, as a cluster that
	// turned the migrator off with --controllers does: the in-tree API is
	// still served, a kube-controller-manager holds its lease, and nobody
	// executes in-tree migrations.
	WithoutMigrator bool
	// Release is the Kubernetes release whose kube-apiserver (and
	// kube-controller-manager) run: a release such as v1.35.4 or a minor
	// such as 1.35, built by make matrix (see ResolveRelease). Empty means
	// the default build of make controlplane. SetRelease changes it
	// between restarts, as an upgrade does.
	Release string
	// EtcdFlags are extra etcd flags, such as a larger
	// --quota-backend-bytes for a benchmark of a million objects.
	EtcdFlags []string
	// StartTimeout bounds how long each process may take to become ready.
	// Zero means one minute.
	StartTimeout time.Duration
	// ServingIPs are addresses besides 127.0.0.1 that kube-apiserver's
	// serving certificate names: a node's address and the kubernetes
	// Service's, where pods reach it (test/node). It still listens on
	// 127.0.0.1 unless APIServerFlags say otherwise.
	ServingIPs []net.IP
}

// ControlPlane is a running etcd and kube-apiserver, and optionally
// kube-controller-manager.
type ControlPlane struct {
	// Dir is the directory holding the control plane's files.
	Dir string
	// EtcdURL is etcd's client URL.
	EtcdURL string
	// APIServerURL is kube-apiserver's https URL.
	APIServerURL string

	caCert       []byte
	adminToken   string
	removeDir    bool
	startTimeout time.Duration
	apiPort      int
	baseFlags    []string
	binDir       string

	mu         sync.Mutex
	extraFlags []string
	etcd       *process
	apiserver  *process
	aggregated []*process
	// controllerManager is set up by the first StartControllerManager.
	controllerManager      *process
	controllerManagerURL   string
	controllerManagerFlags []string
	withoutMigrator        bool
	// release is the resolved Options.Release of the next StartAPIServer.
	release string
	// reserved holds the reservations of every port the control plane
	// listens on, so that no other test process picks one while a server
	// restarts on it; released when the control plane stops.
	portsMu  sync.Mutex
	reserved []*os.File
}

// Start starts etcd and kube-apiserver, and kube-controller-manager if
// opts.ControllerManager is set, and waits until they are ready.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	binDir, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	release, err := ResolveRelease(binDir, opts.Release)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: opts.Dir, startTimeout: opts.StartTimeout, extraFlags: opts.APIServerFlags, withoutMigrator: opts.WithoutMigrator, release: release,
		controllerManagerFlags: opts.ControllerManagerFlags}
	if cp.startTimeout == 0 {
		cp.startTimeout = time.Minute
	}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "svm-controlplane-"); err != nil {
			return nil, fmt.Errorf("create control plane directory: %w", err)
		}
		cp.removeDir = true
	} else if err := os.MkdirAll(cp.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create control plane directory: %w", err)
	}
	// Fail before starting anything, not a minute later.
	if opts.ControllerManager {
		if err := requireControllerManager(binDir, release); err != nil {
			cp.cleanup()
			return nil, err
		}
	}
	if err := cp.prepare(binDir, opts.EtcdFlags, opts.ServingIPs); err != nil {
		cp.cleanup()
		return nil, err
	}
	if err := cp.StartEtcd(ctx); err != nil {
		cp.cleanup()
		return nil, err
	}
	if err := cp.StartAPIServer(ctx); err != nil {
		_ = cp.etcd.stop(syscall.SIGTERM, 10*time.Second)
		cp.cleanup()
		return nil, err
	}
	if opts.ControllerManager {
		if err := cp.StartControllerManager(ctx); err != nil {
			_ = cp.apiserver.stop(syscall.SIGTERM, 10*time.Second)
			_ = cp.etcd.stop(syscall.SIGTERM, 10*time.Second)
			cp.cleanup()
			return nil, err
		}
	}
	return cp, nil
}

// prepare picks ports and writes the certificates and credentials that stay
// the same across restarts, and sets etcd's flags (etcdFlags added).
func (cp *ControlPlane) prepare(binDir string, etcdFlags []string, servingIPs []net.IP) error {
	cp.binDir = binDir
	ports, err := cp.freePorts(3)
	if err != nil {
		return err
	}
	etcdClientPort, etcdPeerPort := ports[0], ports[1]
	cp.apiPort = ports[2]
	cp.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(etcdClientPort)
	cp.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(cp.apiPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeerPort)

	ips := append([]net.IP{net.ParseIP("127.0.0.1")}, servingIPs...)
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", ips, []string{"localhost"})
	if err != nil {
		return fmt.Errorf("generate serving certificate: %w", err)
	}
	saKey, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return fmt.Errorf("generate service account key: %w", err)
	}
	tokenBytes := make([]byte, 16)
	if _, err := rand.Read(tokenBytes); err != nil {
		return fmt.Errorf("generate admin token: %w", err)
	}
	cp.caCert, cp.adminToken = certPEM, hex.EncodeToString(tokenBytes)

	files := map[string][]byte{
		"serving.crt": certPEM,
		"serving.key": keyPEM,
		"sa.key":      saKey,
		"tokens.csv":  fmt.Appendf(nil, "%s,%s,%s,\"system:masters\"\n", cp.adminToken, AdminUser, AdminUser),
	}
	for name, data := range files {
		if err := os.WriteFile(cp.path(name), data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}

	cp.etcd = &process{
		name:    "etcd",
		path:    filepath.Join(binDir, "etcd"),
		logPath: cp.path("etcd.log"),
		args: []string{
			"--name=default",
			"--data-dir=" + cp.path("etcd-data"),
			"--listen-client-urls=" + cp.EtcdURL,
			"--advertise-client-urls=" + cp.EtcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=default=" + peerURL,
			// Tests and the demo need no durability against power loss.
			"--unsafe-no-fsync",
		},
	}
	cp.etcd.args = append(cp.etcd.args, etcdFlags...)
	cp.baseFlags = []string{
		"--etcd-servers=" + cp.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(cp.apiPort),
		"--tls-cert-file=" + cp.path("serving.crt"),
		"--tls-private-key-file=" + cp.path("serving.key"),
		"--cert-dir=" + cp.path("apiserver-certs"),
		"--token-auth-file=" + cp.path("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + cp.path("sa.key"),
		"--service-account-signing-key-file=" + cp.path("sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		// One API server: there is no endpoints reconciliation to do.
		"--endpoint-reconciler-type=none",
	}
	frontProxy, err := cp.frontProxyFlags()
	if err != nil {
		return err
	}
	cp.baseFlags = append(cp.baseFlags, frontProxy...)
	cp.apiserver = &process{
		name:    "kube-apiserver",
		logPath: cp.path("kube-apiserver.log"),
	}
	return nil
}

func (cp *ControlPlane) path(name string) string { return filepath.Join(cp.Dir, name) }

// BinPath is the path of a program built next to kube-apiserver (make
// controlplane and make kubectl build into the same directory).
func (cp *ControlPlane) BinPath(name string) string { return filepath.Join(cp.binDir, name) }

// SetAPIServerFlags replaces the extra kube-apiserver flags. They take effect
// at the next StartAPIServer.
func (cp *ControlPlane) SetAPIServerFlags(flags ...string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.extraFlags = append([]string(nil), flags...)
}

// SetRelease changes the Kubernetes release (see Options.Release) of the
// next StartAPIServer, StartPeer and StartControllerManager, as a rolling
// upgrade does one server at a time. It returns the release resolved.
func (cp *ControlPlane) SetRelease(release string) (string, error) {
	resolved, err := ResolveRelease(cp.binDir, release)
	if err != nil {
		return "", err
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.release = resolved
	return resolved, nil
}

// Release is the resolved release SetRelease or Options.Release chose,
// empty for the default build.
func (cp *ControlPlane) Release() string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.release
}

// StartEtcd starts etcd on its data directory and waits until it is healthy.
func (cp *ControlPlane) StartEtcd(ctx context.Context) error {
	if err := cp.etcd.start(); err != nil {
		return err
	}
	healthURL := cp.EtcdURL + "/health"
	return cp.etcd.waitReady(ctx, cp.startTimeout, func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, healthURL)
	})
}

// StartAPIServer starts kube-apiserver and waits until /readyz is ok.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	cp.mu.Lock()
	cp.apiserver.args = append(append([]string(nil), cp.baseFlags...), cp.extraFlags...)
	cp.apiserver.path = binaryFor(cp.binDir, "kube-apiserver", cp.release)
	cp.mu.Unlock()
	if err := cp.apiserver.start(); err != nil {
		return err
	}
	client, err := rest.HTTPClientFor(cp.RESTConfig())
	if err != nil {
		return fmt.Errorf("build readiness client: %w", err)
	}
	readyURL := cp.APIServerURL + "/readyz"
	return cp.apiserver.waitReady(ctx, cp.startTimeout, func(ctx context.Context) error {
		return httpOK(ctx, client, readyURL)
	})
}

// StopAPIServer stops kube-apiserver gracefully (SIGTERM).
func (cp *ControlPlane) StopAPIServer() error {
	return cp.apiserver.stop(syscall.SIGTERM, 30*time.Second)
}

// KillAPIServer kills kube-apiserver with SIGKILL, as a crash would.
func (cp *ControlPlane) KillAPIServer() error { return cp.apiserver.stop(syscall.SIGKILL, 0) }

// RestartAPIServer stops kube-apiserver gracefully and starts it again with
// the current flags.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	if err := cp.StopAPIServer(); err != nil {
		return err
	}
	return cp.StartAPIServer(ctx)
}

// StopEtcd stops etcd gracefully (SIGTERM).
func (cp *ControlPlane) StopEtcd() error { return cp.etcd.stop(syscall.SIGTERM, 30*time.Second) }

// KillEtcd kills etcd with SIGKILL.
func (cp *ControlPlane) KillEtcd() error { return cp.etcd.stop(syscall.SIGKILL, 0) }

// APIServerPID is kube-apiserver's process id (0 when stopped), for
// benchmarks that read its CPU accounting.
func (cp *ControlPlane) APIServerPID() int { return cp.apiserver.pid() }

// APIServerRunning reports whether kube-apiserver is running.
func (cp *ControlPlane) APIServerRunning() bool { return cp.apiserver.running() }

// Stop stops every process and removes the directory if Start created it.
// kube-controller-manager stops first, so that it does not spend its last
// seconds retrying against an API server that is gone.
func (cp *ControlPlane) Stop() error {
	errs := []error{cp.StopControllerManager()}
	cp.mu.Lock()
	aggregated := cp.aggregated
	cp.mu.Unlock()
	for _, p := range aggregated {
		errs = append(errs, p.stop(syscall.SIGTERM, 30*time.Second))
	}
	errs = append(errs, cp.StopAPIServer(), cp.StopEtcd())
	cp.cleanup()
	return errors.Join(errs...)
}

func (cp *ControlPlane) cleanup() {
	cp.portsMu.Lock()
	reserved := cp.reserved
	cp.reserved = nil
	cp.portsMu.Unlock()
	releasePorts(reserved)
	if cp.removeDir {
		_ = os.RemoveAll(cp.Dir)
	}
}

// RESTConfig returns a client configuration for the admin user, with client
// rate limits high enough that they never hide the server's behaviour.
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            cp.APIServerURL,
		BearerToken:     cp.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.caCert},
		QPS:             1000,
		Burst:           2000,
	}
}

// Kubeconfig returns an admin kubeconfig for the control plane.
func (cp *ControlPlane) Kubeconfig() *clientcmdapi.Config {
	const name = "svm-local"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: cp.APIServerURL, CertificateAuthorityData: cp.caCert}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: cp.adminToken}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	return cfg
}

// WriteKubeconfig writes the admin kubeconfig to path.
func (cp *ControlPlane) WriteKubeconfig(path string) error {
	if err := clientcmd.WriteToFile(*cp.Kubeconfig(), path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// EtcdClient returns a client for reading the raw values the API server
// stores. The caller closes it.
func (cp *ControlPlane) EtcdClient() (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{cp.EtcdURL},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd: %w", err)
	}
	return c, nil
}

func httpOK(ctx context.Context, client *http.Client, url string) error {
	_, err := httpGet(ctx, client, url)
	return err
}

// httpGet returns the body of url's answer (at most 1 MiB), or an error
// unless it is 200 OK.
func httpGet(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}

// findBinDir locates the directory holding both binaries.
func findBinDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv(BinDirEnv)
	}
	if dir != "" {
		if hasBinaries(dir) {
			return filepath.Abs(dir)
		}
		return "", fmt.Errorf("%s has no kube-apiserver and etcd; run 'make controlplane'", dir)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if hasBinaries(filepath.Join(d, "bin")) {
			return filepath.Join(d, "bin"), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no bin/ directory with kube-apiserver and etcd above %s and %s is unset; run 'make controlplane'", wd, BinDirEnv)
		}
	}
}

func hasBinaries(dir string) bool {
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

// ServingCertFile is the path of kube-apiserver's self-signed serving
// certificate, its own CA: what kube-controller-manager's --root-ca-file
// publishes to pods as kube-root-ca.crt.
func (cp *ControlPlane) ServingCertFile() string { return cp.path("serving.crt") }

// APIPort is kube-apiserver's secure port.
func (cp *ControlPlane) APIPort() int { return cp.apiPort }
