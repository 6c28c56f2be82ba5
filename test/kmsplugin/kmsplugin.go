// Package kmsplugin is a KMS v2 plugin for tests: kube-apiserver's
// envelope encryption talks to it over gRPC on a unix socket, as it would
// to a real key management service, so that svm's tests can rotate the
// key encryption key and see what the API server then writes to etcd.
//
// It is test support, not a KMS. Its keys are derived from their key IDs
// (SHA-256 of a fixed label and the ID), so anyone who knows a key ID can
// decrypt what was sealed under it: deterministic keys make a plugin
// restarted on the same key IDs read what an earlier one sealed, which is
// all a test needs. A real KMS keeps its key versions secret and
// remembers them; this one remembers which key IDs it has served and
// decrypts under those only, so that, as with a real KMS after a
// rotation, values sealed under an old key ID still decrypt.
//
// A highly available control plane runs a plugin next to each API
// server, every one in front of the same KMS, and each server learns a
// rotation from its own plugin, at its own time. Instance starts such a
// second plugin on the same socket: each API server names the same
// endpoint in the same configuration, as on real nodes, where every
// server's plugin listens at the same path, and the plugin tells the
// servers apart by the process at the other end of the socket
// (SO_PEERCRED) and its command line. The instances rotate one by one,
// and each decrypts under every key ID any of them has served, since the
// KMS behind them has every key version.
//
// The plugin serves k8s.io/kms's gRPC service (service.NewGRPCService)
// on a grpc.Server of its own, rather than through the service's
// ListenAndServe: the socket then exists before Start returns (the API
// server must find it at its start), it stops with the test whatever
// state it is in, and its transport credentials can read the caller's
// process from the socket.
package kmsplugin

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	kmsapi "k8s.io/kms/apis/v2"
	"k8s.io/kms/pkg/service"
)

// Version is the KMS API version the plugin reports, the only one
// kube-apiserver 1.34 and later accept besides v2beta1.
const Version = "v2"

// keyLabel makes the plugin's keys its own: a key is SHA-256 of it and
// the key ID.
const keyLabel = "svm-test-kmsplugin-v1:"

// Plugin is a running KMS v2 plugin instance. Its methods are safe to
// call while the API server calls it.
type Plugin struct {
	// Socket is the path of the unix socket it listens on.
	Socket string

	kms *kms

	mu    sync.Mutex
	keyID string
	calls map[string]int
	// sealed is when it first encrypted under each key ID.
	sealed map[string]time.Time
}

var _ service.Service = (*Plugin)(nil)

// kms is what the plugin instances on one socket share, as instances in
// front of one key management service do: the key IDs any of them has
// served, which every one decrypts under, and which instance answers
// which caller.
type kms struct {
	mu    sync.Mutex
	known map[string]bool
	first *Plugin
	// others answer the callers they claim, the first to claim one.
	others []instance
}

// instance is a plugin instance that answers the callers claims accepts.
type instance struct {
	plugin *Plugin
	claims func(Caller) bool
}

// Caller is the process at the other end of a connection to the socket,
// as the kernel tells it (SO_PEERCRED) and /proc shows it.
type Caller struct {
	// PID is its process ID.
	PID int
	// Args is its command line, the program first.
	Args []string
}

// Start starts a plugin whose current key ID is keyID on a unix socket in
// a new directory under /tmp (a socket's path must be short, shorter than
// t.TempDir's can be), listening before it returns. It stops, and its
// directory goes, when t ends: start it before the control plane that
// uses it, so that it stops after.
func Start(t testing.TB, keyID string) *Plugin {
	t.Helper()
	p, stop, err := Serve(keyID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// Serve is Start for a program that is not a test (a demo): stop stops
// the plugin and removes its directory, and says why serving ended if not
// by stop.
func Serve(keyID string) (p *Plugin, stop func() error, err error) {
	if err := validKeyID(keyID); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("/tmp", "svmkms-")
	if err != nil {
		return nil, nil, err
	}
	k := &kms{known: map[string]bool{keyID: true}}
	p = k.newPlugin(filepath.Join(dir, "kms.sock"), keyID)
	k.first = p
	ln, err := net.Listen("unix", p.Socket)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("listen on %s: %w", p.Socket, err)
	}
	server := grpc.NewServer(grpc.Creds(callerCredentials{}), grpc.UnaryInterceptor(k.count))
	kmsapi.RegisterKeyManagementServiceServer(server, service.NewGRPCService(p.Socket, 3*time.Second, router{k}))
	served := make(chan error, 1)
	go func() { served <- server.Serve(ln) }()
	stop = func() error {
		server.Stop()
		err := <-served
		_ = os.RemoveAll(dir)
		if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("KMS plugin on %s: %w", p.Socket, err)
		}
		return nil
	}
	return p, stop, nil
}

// EncryptionConfig is an EncryptionConfiguration that encrypts Secrets
// with the KMS v2 provider named provider, served at endpoint
// ("unix:///path"), and reads unencrypted ones too. apiVersion v2 is
// stated: it defaults to v1, which kube-apiserver refuses unless the
// deprecated KMSv1 feature gate is on.
func EncryptionConfig(provider, endpoint string) []byte {
	return fmt.Appendf(nil, `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - kms:
      apiVersion: v2
      name: %s
      endpoint: %s
      timeout: 3s
  - identity: {}
`, provider, endpoint)
}

func (k *kms) newPlugin(socket, keyID string) *Plugin {
	return &Plugin{Socket: socket, kms: k, keyID: keyID, calls: map[string]int{}, sealed: map[string]time.Time{}}
}

// Instance starts another instance of p's KMS on p's socket, as the
// plugin next to another API server: its current key ID is keyID, it
// answers the callers that claims accepts (asked at each call, the
// instances in the order they were started), and it rotates on its own.
// Start it before the API server that calls it. It stops with p.
func (p *Plugin) Instance(keyID string, claims func(Caller) bool) (*Plugin, error) {
	if err := validKeyID(keyID); err != nil {
		return nil, err
	}
	k := p.kms
	q := k.newPlugin(p.Socket, keyID)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.known[keyID] = true
	k.others = append(k.others, instance{plugin: q, claims: claims})
	return q, nil
}

// Endpoint is the plugin's address as an EncryptionConfiguration names it.
func (p *Plugin) Endpoint() string { return "unix://" + p.Socket }

// KeyID is the key ID the plugin encrypts under and reports now.
func (p *Plugin) KeyID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keyID
}

// Rotate makes keyID the key the plugin encrypts under and reports, as an
// operator rotating a KMS key would; it, and every other instance of its
// KMS, keeps decrypting under every key ID served before. API servers
// notice at their next Status call.
func (p *Plugin) Rotate(keyID string) error {
	if err := validKeyID(keyID); err != nil {
		return err
	}
	p.kms.mu.Lock()
	p.kms.known[keyID] = true
	p.kms.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keyID = keyID
	return nil
}

// Calls is how many calls of method ("Status", "Encrypt" or "Decrypt")
// the plugin has answered, failed ones too.
func (p *Plugin) Calls(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[method]
}

// FirstSealed is when the plugin first encrypted under keyID, zero if it
// has not. kube-apiserver asks its plugin to encrypt only a data key of
// its own, which it makes at its start and in the check that swaps it to
// a new key ID, just before the swap: for an instance that one API server
// calls, the first seal under a rotated key is when that server began to
// swap to it, and it writes under the key only after.
func (p *Plugin) FirstSealed(keyID string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sealed[keyID]
}

// count is the server's interceptor: it counts every call by its method,
// on the instance that answers it.
func (k *kms) count(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p := k.answering(ctx)
	p.mu.Lock()
	p.calls[filepath.Base(info.FullMethod)]++
	p.mu.Unlock()
	return handler(ctx, req)
}

// answering is the instance that answers the caller of ctx: the first
// that claims it, else the first instance.
func (k *kms) answering(ctx context.Context) *Plugin {
	var c Caller
	if pr, ok := peer.FromContext(ctx); ok {
		if info, ok := pr.AuthInfo.(callerInfo); ok {
			c = info.Caller
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, in := range k.others {
		if in.claims(c) {
			return in.plugin
		}
	}
	return k.first
}

// knows reports whether any instance of k has served keyID.
func (k *kms) knows(keyID string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.known[keyID]
}

// router is the service the socket serves: each call goes to the
// instance that answers its caller.
type router struct{ kms *kms }

func (r router) Status(ctx context.Context) (*service.StatusResponse, error) {
	return r.kms.answering(ctx).Status(ctx)
}

func (r router) Encrypt(ctx context.Context, uid string, data []byte) (*service.EncryptResponse, error) {
	return r.kms.answering(ctx).Encrypt(ctx, uid, data)
}

func (r router) Decrypt(ctx context.Context, uid string, req *service.DecryptRequest) ([]byte, error) {
	return r.kms.answering(ctx).Decrypt(ctx, uid, req)
}

// Status answers healthy, with the current key ID.
func (p *Plugin) Status(context.Context) (*service.StatusResponse, error) {
	return &service.StatusResponse{Version: Version, Healthz: "ok", KeyID: p.KeyID()}, nil
}

// Encrypt seals data with AES-GCM under the current key, the key ID as
// additional data, and says which key ID it used: the one Status reports,
// as kube-apiserver requires of a rotation.
func (p *Plugin) Encrypt(_ context.Context, _ string, data []byte) (*service.EncryptResponse, error) {
	keyID := p.KeyID()
	aead, err := newAEAD(keyID)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("read nonce: %w", err)
	}
	p.mu.Lock()
	if _, ok := p.sealed[keyID]; !ok {
		p.sealed[keyID] = time.Now()
	}
	p.mu.Unlock()
	return &service.EncryptResponse{Ciphertext: aead.Seal(nonce, nonce, data, []byte(keyID)), KeyID: keyID}, nil
}

// Decrypt opens a ciphertext under the key of the request's key ID, any
// that an instance of the plugin's KMS has served, not only the current
// one.
func (p *Plugin) Decrypt(_ context.Context, _ string, req *service.DecryptRequest) ([]byte, error) {
	if !p.kms.knows(req.KeyID) {
		return nil, fmt.Errorf("unknown key ID %q", req.KeyID)
	}
	aead, err := newAEAD(req.KeyID)
	if err != nil {
		return nil, err
	}
	if len(req.Ciphertext) < aead.NonceSize() {
		return nil, errors.New("ciphertext shorter than its nonce")
	}
	nonce, sealed := req.Ciphertext[:aead.NonceSize()], req.Ciphertext[aead.NonceSize():]
	plain, err := aead.Open(nil, nonce, sealed, []byte(req.KeyID))
	if err != nil {
		return nil, fmt.Errorf("open under key ID %q: %w", req.KeyID, err)
	}
	return plain, nil
}

// newAEAD is AES-256-GCM under the key of keyID.
func newAEAD(keyID string) (cipher.AEAD, error) {
	key := sha256.Sum256([]byte(keyLabel + keyID))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// validKeyID refuses what kube-apiserver refuses from Status: an empty key
// ID or one longer than 1 kB.
func validKeyID(keyID string) error {
	if keyID == "" || len(keyID) > 1024 {
		return fmt.Errorf("KMS key ID %q: want 1 to 1024 bytes", keyID)
	}
	return nil
}

// callerCredentials are the server's transport credentials: no security
// (the socket's file mode is the only guard, as for a real plugin), and
// the calling process read from the socket, which routes its calls.
type callerCredentials struct{}

// callerInfo is the AuthInfo of a connection: who is calling.
type callerInfo struct {
	credentials.CommonAuthInfo
	Caller
}

func (callerInfo) AuthType() string { return "peercred" }

func (callerCredentials) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, err := callerOf(conn)
	if err != nil {
		return nil, nil, err
	}
	return conn, callerInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}, Caller: c}, nil
}

func (callerCredentials) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("the KMS plugin's credentials serve; they do not dial")
}

func (callerCredentials) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (c callerCredentials) Clone() credentials.TransportCredentials { return c }

// OverrideServerName is deprecated, yet still part of the interface.
func (callerCredentials) OverrideServerName(string) error { return nil }

// callerOf reads the process at the other end of a unix socket
// connection: its ID from the kernel, its command line from /proc.
func callerOf(conn net.Conn) (Caller, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return Caller{}, fmt.Errorf("a connection of type %T, not a unix socket's", conn)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Caller{}, err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return Caller{}, err
	}
	if credErr != nil {
		return Caller{}, fmt.Errorf("read the caller of the KMS plugin's socket: %w", credErr)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cred.Pid))
	if err != nil {
		return Caller{}, fmt.Errorf("read the command line of the KMS plugin's caller: %w", err)
	}
	return Caller{PID: int(cred.Pid), Args: strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")}, nil
}
