package kmsplugin_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	kmsapi "k8s.io/kms/apis/v2"

	"github.com/svm-project/svm/test/kmsplugin"
)

// dial connects to the plugin as kube-apiserver does, over its socket.
func dial(t *testing.T, p *kmsplugin.Plugin) kmsapi.KeyManagementServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(p.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return kmsapi.NewKeyManagementServiceClient(conn)
}

// TestRotationKeepsOldKeys: after a rotation the plugin reports and
// encrypts under the new key ID and still decrypts what it sealed under
// the old one; a ciphertext named with another key ID does not open.
func TestRotationKeepsOldKeys(t *testing.T) {
	p := kmsplugin.Start(t, "key-1")
	c := dial(t, p)
	ctx := t.Context()

	st, err := c.Status(ctx, &kmsapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != "v2" || st.Healthz != "ok" || st.KeyId != "key-1" {
		t.Fatalf("status %+v, want v2, ok, key-1", st)
	}
	old, err := c.Encrypt(ctx, &kmsapi.EncryptRequest{Plaintext: []byte("seed one"), Uid: "1"})
	if err != nil || old.KeyId != "key-1" {
		t.Fatalf("encrypt under key-1: %+v, %v", old, err)
	}

	if err := p.Rotate("key-2"); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Status(ctx, &kmsapi.StatusRequest{}); err != nil || st.KeyId != "key-2" {
		t.Fatalf("status after the rotation: %+v, %v; want key-2", st, err)
	}
	fresh, err := c.Encrypt(ctx, &kmsapi.EncryptRequest{Plaintext: []byte("seed two"), Uid: "2"})
	if err != nil || fresh.KeyId != "key-2" {
		t.Fatalf("encrypt after the rotation: %+v, %v; want key-2", fresh, err)
	}
	for _, tc := range []struct {
		ciphertext []byte
		keyID      string
		want       string
	}{
		{old.Ciphertext, "key-1", "seed one"},
		{fresh.Ciphertext, "key-2", "seed two"},
	} {
		got, err := c.Decrypt(ctx, &kmsapi.DecryptRequest{Ciphertext: tc.ciphertext, KeyId: tc.keyID, Uid: "3"})
		if err != nil || string(got.Plaintext) != tc.want {
			t.Errorf("decrypt under %s: %q, %v; want %q", tc.keyID, got.GetPlaintext(), err, tc.want)
		}
	}
	if _, err := c.Decrypt(ctx, &kmsapi.DecryptRequest{Ciphertext: old.Ciphertext, KeyId: "key-2", Uid: "4"}); err == nil {
		t.Error("a key-1 ciphertext opened under key-2")
	}
	if _, err := c.Decrypt(ctx, &kmsapi.DecryptRequest{Ciphertext: old.Ciphertext, KeyId: "key-9", Uid: "5"}); err == nil {
		t.Error("decrypted under key-9, which the plugin never served")
	}
	if got := p.Calls("Status"); got != 2 {
		t.Errorf("counted %d Status calls, want 2", got)
	}
}

// TestStopsWithTheTest: once the test that started it ends, the socket
// is gone.
func TestStopsWithTheTest(t *testing.T) {
	var socket string
	t.Run("serve", func(t *testing.T) {
		p := kmsplugin.Start(t, "k")
		socket = p.Socket
		if _, err := dial(t, p).Status(t.Context(), &kmsapi.StatusRequest{}); err != nil {
			t.Fatal(err)
		}
	})
	c := dial(t, &kmsplugin.Plugin{Socket: socket})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := c.Status(ctx, &kmsapi.StatusRequest{}); err == nil {
		t.Errorf("the plugin on %s still answers after its test ended", socket)
	}
}

// TestInstancesShareTheKMS: a second instance on the socket answers the
// callers it claims, here this test's process, told by the kernel; it
// rotates on its own, and decrypts under a key ID only the other instance
// served, as two plugins in front of one KMS do.
func TestInstancesShareTheKMS(t *testing.T) {
	p := kmsplugin.Start(t, "key-1")
	var mu sync.Mutex
	var seen []kmsplugin.Caller
	q, err := p.Instance("key-1", func(c kmsplugin.Caller) bool {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, c)
		return c.PID == os.Getpid()
	})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	ctx := t.Context()

	if err := p.Rotate("key-2"); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Status(ctx, &kmsapi.StatusRequest{}); err != nil || st.KeyId != "key-1" {
		t.Fatalf("status after the other instance rotated: %+v, %v; want key-1", st, err)
	}
	mu.Lock()
	var first kmsplugin.Caller
	if len(seen) > 0 {
		first = seen[0]
	}
	mu.Unlock()
	if first.PID != os.Getpid() || len(first.Args) == 0 || first.Args[0] != os.Args[0] {
		t.Errorf("the instance was asked about caller %+v, want this process (%d, %s)", first, os.Getpid(), os.Args[0])
	}
	if q.Calls("Status") != 1 || p.Calls("Status") != 0 {
		t.Errorf("Status calls: %d on the instance that claims this process, %d on the other; want 1 and 0", q.Calls("Status"), p.Calls("Status"))
	}

	// Sealed by the other instance, under the key it rotated to.
	other, err := p.Encrypt(ctx, "1", []byte("seed of the other server"))
	if err != nil || other.KeyID != "key-2" {
		t.Fatalf("encrypt on the rotated instance: %+v, %v; want key-2", other, err)
	}
	got, err := c.Decrypt(ctx, &kmsapi.DecryptRequest{Ciphertext: other.Ciphertext, KeyId: "key-2", Uid: "2"})
	if err != nil || string(got.Plaintext) != "seed of the other server" {
		t.Errorf("decrypt under key-2, which only the other instance served: %q, %v", got.GetPlaintext(), err)
	}
	if _, err := c.Decrypt(ctx, &kmsapi.DecryptRequest{Ciphertext: other.Ciphertext, KeyId: "key-9", Uid: "3"}); err == nil {
		t.Error("decrypted under key-9, which no instance served")
	}

	if !q.FirstSealed("key-3").IsZero() {
		t.Fatal("sealed under key-3 before any rotation to it")
	}
	if err := q.Rotate("key-3"); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	enc, err := c.Encrypt(ctx, &kmsapi.EncryptRequest{Plaintext: []byte("seed"), Uid: "4"})
	if err != nil || enc.KeyId != "key-3" {
		t.Fatalf("encrypt after the instance rotated: %+v, %v; want key-3", enc, err)
	}
	if at := q.FirstSealed("key-3"); at.Before(before) || time.Since(at) > time.Minute {
		t.Errorf("first sealed under key-3 at %s, want after %s", at, before)
	}
	if !p.FirstSealed("key-3").IsZero() || p.FirstSealed("key-2").IsZero() {
		t.Errorf("the other instance first sealed under key-3 at %s and key-2 at %s; want never, and once", p.FirstSealed("key-3"), p.FirstSealed("key-2"))
	}
}
