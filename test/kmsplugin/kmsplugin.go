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
// The plugin serves k8s.io/kms's gRPC service (service.NewGRPCService)
// on a grpc.Server of its own, rather than through the service's
// ListenAndServe: the socket then exists before Start returns (the API
// server must find it at its start), it stops with the test whatever
// state it is in, and a server option such as transport credentials that
// read the caller's process from the socket (SO_PEERCRED) can be added
// when a test needs to answer two API servers differently.
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
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	kmsapi "k8s.io/kms/apis/v2"
	"k8s.io/kms/pkg/service"
)

// Version is the KMS API version the plugin reports, the only one
// kube-apiserver 1.34 and later accept besides v2beta1.
const Version = "v2"

// keyLabel makes the plugin's keys its own: a key is SHA-256 of it and
// the key ID.
const keyLabel = "svm-test-kmsplugin-v1:"

// Plugin is a running KMS v2 plugin. Its methods are safe to call while
// the API server calls it.
type Plugin struct {
	// Socket is the path of the unix socket it listens on.
	Socket string

	mu    sync.Mutex
	keyID string
	// known are the key IDs it has served, which it decrypts under.
	known map[string]bool
	calls map[string]int
}

var _ service.Service = (*Plugin)(nil)

// Start starts a plugin whose current key ID is keyID on a unix socket in
// a new directory under /tmp (a socket's path must be short, shorter than
// t.TempDir's can be), listening before it returns. It stops, and its
// directory goes, when t ends: start it before the control plane that
// uses it, so that it stops after.
func Start(t testing.TB, keyID string) *Plugin {
	t.Helper()
	if err := validKeyID(keyID); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/tmp", "svmkms-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p := &Plugin{Socket: filepath.Join(dir, "kms.sock"), keyID: keyID, known: map[string]bool{keyID: true}, calls: map[string]int{}}
	ln, err := net.Listen("unix", p.Socket)
	if err != nil {
		t.Fatalf("listen on %s: %v", p.Socket, err)
	}
	server := grpc.NewServer(grpc.UnaryInterceptor(p.count))
	kmsapi.RegisterKeyManagementServiceServer(server, service.NewGRPCService(p.Socket, 3*time.Second, p))
	served := make(chan error, 1)
	go func() { served <- server.Serve(ln) }()
	t.Cleanup(func() {
		server.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("KMS plugin on %s: %v", p.Socket, err)
		}
	})
	return p
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
// operator rotating a KMS key would; it keeps decrypting under every key
// ID it had before. API servers notice at their next Status call.
func (p *Plugin) Rotate(keyID string) error {
	if err := validKeyID(keyID); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keyID = keyID
	p.known[keyID] = true
	return nil
}

// Calls is how many calls of method ("Status", "Encrypt" or "Decrypt")
// the plugin has answered, failed ones too.
func (p *Plugin) Calls(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[method]
}

// count is the server's interceptor: it counts every call by its method.
func (p *Plugin) count(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p.mu.Lock()
	p.calls[filepath.Base(info.FullMethod)]++
	p.mu.Unlock()
	return handler(ctx, req)
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
	return &service.EncryptResponse{Ciphertext: aead.Seal(nonce, nonce, data, []byte(keyID)), KeyID: keyID}, nil
}

// Decrypt opens a ciphertext under the key of the request's key ID, any
// that the plugin has served, not only the current one.
func (p *Plugin) Decrypt(_ context.Context, _ string, req *service.DecryptRequest) ([]byte, error) {
	p.mu.Lock()
	known := p.known[req.KeyID]
	p.mu.Unlock()
	if !known {
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
