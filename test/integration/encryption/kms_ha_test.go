package encryption_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/rotation"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
	"github.com/svm-project/svm/test/kmsplugin"
)

// kmsHA is a control plane of two API servers on one etcd, each calling a
// KMS v2 plugin of its own in front of one KMS, with svm controller
// reading both.
type kmsHA struct {
	env                *framework.Env
	peer               *controlplane.Peer
	pluginA, pluginB   *kmsplugin.Plugin
	endpoints, metrics string
	// before are svm's re-encryptions made before the rotation.
	before map[string]bool
}

// kmsReencryptions are every re-encryption svm made, by name.
func kmsReencryptions(t *testing.T, env *framework.Env) map[string]migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := env.Client.List(framework.Context(t, time.Minute), &list, client.MatchingLabels{rotation.CreatedByLabel: rotation.CreatedByValue}); err != nil {
		t.Fatal(err)
	}
	out := map[string]migrationv1alpha1.StorageVersionMigration{}
	for _, m := range list.Items {
		out[m.Name] = m
	}
	return out
}

// TestKMSRotationWaitsForEveryAPIServer: two API servers, each with a KMS
// v2 plugin of its own, rotate from key-1 to key-2 about a minute apart.
// While only the first writes under key-2, svm makes no re-encryption,
// every Secret stays under key-1 in etcd, and svm says it waits, in the
// StorageState, its metric and svm status. Once the second writes under
// key-2 too, svm re-encrypts every Secret under it, with a migration made
// after the second server swapped to it, and records key-2.
func TestKMSRotationWaitsForEveryAPIServer(t *testing.T) {
	t.Parallel()
	const n = 300
	h := startKMSHA(t, n)
	snapshot := h.env.TakeSnapshot(t, framework.Secrets)

	// The first server's plugin rotates; the probes, through the first
	// server only, make it call Status at once and show it writing under
	// key-2.
	if err := h.pluginA.Rotate("key-2"); err != nil {
		t.Fatal(err)
	}
	rotatedA := time.Now()
	h.env.WaitKMSWritesUnder(t, "kms-probe", "key-2", 3*time.Minute)
	swappedA := h.pluginA.FirstSealed("key-2")
	h.expectWaiting(t, n, rotatedA.Add(time.Minute))

	if err := h.pluginB.Rotate("key-2"); err != nil {
		t.Fatal(err)
	}
	rotatedB := time.Now()
	e := waitRewrittenUnderKMS(t, h.env, "key-2", 3*time.Minute)
	swappedB := h.pluginB.FirstSealed("key-2")
	var m migrationv1alpha1.StorageVersionMigration
	if err := h.env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: e.RewrittenBy}, &m); err != nil {
		t.Fatal(err)
	}
	t.Logf("plugin A rotated at %s, server A swapped at %s; plugin B rotated at %s (%s later), server B swapped at %s; re-encryption %s created at %s, recorded %s after B's rotation",
		clock(rotatedA), clock(swappedA), clock(rotatedB), rotatedB.Sub(rotatedA).Round(time.Second), clock(swappedB), m.Name, clock(m.CreationTimestamp.Time), time.Since(rotatedB).Round(time.Second))
	h.expectMadeAfter(t, m, rotatedB, swappedB)
	h.expectReencrypted(t, n, snapshot)
}

// startKMSHA starts the two servers with their plugins on key-1, n
// Secrets under key-1 and svm controller, and waits until svm has
// recorded key-1 and every migration it made at first sight has ended.
func startKMSHA(t *testing.T, n int) *kmsHA {
	t.Helper()
	h := &kmsHA{metrics: framework.FreeAddress(t)}
	h.env, h.pluginA = framework.StartWithKMS(t, controlplane.Options{}, "key-1")
	h.peer, h.pluginB = h.env.StartPeerWithKMS(t, h.pluginA, "apiserver-b", "key-1")
	h.endpoints = "--apiserver-endpoints=" + h.env.CP.APIServerURL + "," + h.peer.URL
	if h.pluginB.Calls("Status") == 0 {
		t.Fatal("the second API server became ready without calling its own plugin")
	}
	h.env.InstallCRDs(t, framework.CRDBasesDir())
	h.env.CreateSecrets(t, kmsNamespaces, n)
	if diff := cmp.Diff(map[string]int{framework.KMSProvider + "/key-1": n}, storedUnderKMS(t, h.env)); diff != "" {
		t.Fatalf("before the rotation (-want +got):\n%s", diff)
	}
	h.env.StartSVM(t, controllerArgs(h.endpoints, "--metrics-bind-address", h.metrics)...)
	waitRewrittenUnderKMS(t, h.env, "key-1", 3*time.Minute)
	h.env.WaitMigrationsFinished(t, 3*time.Minute)
	h.before = map[string]bool{}
	for name := range kmsReencryptions(t, h.env) {
		h.before[name] = true
	}
	return h
}

// expectWaiting checks, every check interval until until, that svm waits
// for the second server, which still writes under key-1: no re-encryption
// made since the rotation, every Secret under key-1 in etcd, the
// StorageState, svm's metric and svm status saying why.
func (h *kmsHA) expectWaiting(t *testing.T, n int, until time.Time) {
	t.Helper()
	const why = "answers different keys"
	h.env.WaitKMSWritesThrough(t, h.peer.RESTConfig(), "kms-probe-b", "key-1", 0)
	h.env.WaitStorageState(t, secrets, time.Minute, "waiting for the other API server's key", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.Encryption != nil && strings.Contains(s.Status.Encryption.Message, why)
	})
	if e := svmStatus(t, h.env, h.endpoints); e.Agreed || e.AllRewritten || !strings.Contains(e.Verdict, "Re-encryption waits") ||
		!strings.Contains(e.Verdict, why) || !strings.Contains(e.Verdict, "still needed") {
		t.Errorf("svm status while one server writes under key-2: agreed %v, allRewritten %v, verdict %q; want a verdict saying re-encryption waits, the keys differ and the old ones are still needed", e.Agreed, e.AllRewritten, e.Verdict)
	}
	statusCalls, looks, start := h.pluginB.Calls("Status"), 0, time.Now()
	for ; looks == 0 || time.Now().Before(until); looks++ {
		for name, m := range kmsReencryptions(t, h.env) {
			if !h.before[name] {
				t.Fatalf("re-encryption %s (%s=%q) was made while one of two API servers wrote under key-2", name, rotation.KMSKeysAnnotation, m.Annotations[rotation.KMSKeysAnnotation])
			}
		}
		if diff := cmp.Diff(map[string]int{framework.KMSProvider + "/key-1": n}, storedUnderKMS(t, h.env)); diff != "" {
			t.Fatalf("while svm waits (-want +got):\n%s", diff)
		}
		h.expectStateWaits(t, why)
		if agreed := framework.Scrape(t, h.metrics).Value("storage_migrator_encryption_config_agreed"); agreed != 0 {
			t.Fatalf("svm's metric says the API servers agree (%v) while one of two writes under key-2", agreed)
		}
		time.Sleep(checkInterval)
	}
	watched := time.Since(start)
	if watched < 3*checkInterval {
		t.Fatalf("the test watched svm wait for %s only, want at least 3 of its check intervals (%s)", watched, checkInterval)
	}
	t.Logf("svm waited, checked %d times in %s (its check interval is %s); server B called its plugin's Status %d times meanwhile, answered key-1",
		looks, watched.Round(time.Second), checkInterval, h.pluginB.Calls("Status")-statusCalls)
}

// expectStateWaits checks that the StorageState of Secrets says svm
// waits, for why, and still records the Secrets rewritten under key-1.
func (h *kmsHA) expectStateWaits(t *testing.T, why string) {
	t.Helper()
	var s migrationv1alpha1.StorageState
	name := migrationv1alpha1.StorageStateName(migrationv1alpha1.GroupResource{Group: secrets.Group, Resource: secrets.Resource})
	if err := h.env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	e := s.Status.Encryption
	key1 := []migrationv1alpha1.KMSKey{{Provider: framework.KMSProvider, KeyIDHash: keyIDHash("key-1")}}
	if e == nil || e.ConfigHash != "" || len(e.KMSKeys) != 0 || !strings.HasPrefix(e.Message, "Waiting: ") || !strings.Contains(e.Message, why) || !cmp.Equal(key1, e.RewrittenKMSKeys) {
		t.Fatalf("while svm waits, the StorageState of Secrets records %+v; want no agreed configuration or keys, a message saying it waits as the keys differ, and key-1 rewritten", e)
	}
}

// expectMadeAfter checks that m re-encrypts under key-2 and was made
// after the second server's plugin rotated and the server swapped, and
// that it is the only re-encryption since the rotation. Creation times
// are in whole seconds, rounded down.
func (h *kmsHA) expectMadeAfter(t *testing.T, m migrationv1alpha1.StorageVersionMigration, rotatedB, swappedB time.Time) {
	t.Helper()
	if got, want := m.Annotations[rotation.KMSKeysAnnotation], framework.KMSProvider+"="+keyIDHash("key-2"); got != want {
		t.Errorf("migration %s is annotated %s=%q, want %q", m.Name, rotation.KMSKeysAnnotation, got, want)
	}
	created := m.CreationTimestamp.Time
	if swappedB.IsZero() || swappedB.Before(rotatedB) {
		t.Fatalf("server B first sealed a data key under key-2 at %s, want after its plugin rotated (%s)", clock(swappedB), clock(rotatedB))
	}
	if created.Before(swappedB.Truncate(time.Second)) {
		t.Errorf("re-encryption %s was created at %s, before server B swapped to key-2 at %s", m.Name, clock(created), clock(swappedB))
	}
	var since []string
	for name := range kmsReencryptions(t, h.env) {
		if !h.before[name] {
			since = append(since, name)
		}
	}
	if len(since) != 1 || since[0] != m.Name {
		t.Errorf("re-encryptions made since the rotation: %v, want %s alone", since, m.Name)
	}
}

// expectReencrypted checks the end: every Secret under key-2 in etcd and
// as it was, both servers writing under key-2, and svm status saying the
// other keys are no longer needed.
func (h *kmsHA) expectReencrypted(t *testing.T, n int, snapshot framework.Snapshot) {
	t.Helper()
	// The first Secret the second server writes is under key-2: it had
	// swapped already, the probe's check did not make it.
	h.env.WaitKMSWritesThrough(t, h.peer.RESTConfig(), "kms-probe-b", "key-2", 0)
	if diff := cmp.Diff(map[string]int{framework.KMSProvider + "/key-2": n}, storedUnderKMS(t, h.env)); diff != "" {
		t.Errorf("after the re-encryption (-want +got):\n%s", diff)
	}
	h.env.ExpectUnchanged(t, framework.Secrets, snapshot)
	expectSecretData(t, h.env, n)
	if e := svmStatus(t, h.env, h.endpoints); !e.AllRewritten || len(e.Servers) != 2 || len(e.KMSKeys) != 1 || e.KMSKeys[0].KeyIDHash != keyIDHash("key-2") {
		t.Errorf("svm status after the re-encryption: allRewritten %v, %d servers, KMS keys %+v, verdict %q; want true, 2, key-2", e.AllRewritten, len(e.Servers), e.KMSKeys, e.Verdict)
	}
	framework.Eventually(t, "svm's metric says Secrets are rewritten", time.Minute, func(context.Context) (bool, error) {
		m := framework.Scrape(t, h.metrics)
		return m.Value("storage_migrator_encryption_resource_rewritten", "resource", "secrets") == 1 && m.Value("storage_migrator_encryption_config_agreed") == 1, nil
	})
}

// clock is t's time of day, to the millisecond, for the log.
func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }
