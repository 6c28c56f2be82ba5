package badinput_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/framework"
)

// largeObjects migrates the largest objects the API server stores. The
// API refuses Secrets and ConfigMaps whose data exceeds 1 MiB, so the
// Secrets hold exactly that, left unencrypted as if written before
// encryption at rest was turned on (an operator who enables encryption
// must then rewrite every Secret). Custom objects have no such limit, only
// etcd's 1.5 MiB per value: theirs hold 1.4 MB each, stored in v1 before
// the CRD moved its storage to v2. Every one is rewritten, into the new
// form, with its content intact, while svm receives only metadata: a few
// kilobytes for megabytes of objects, so its memory never holds them.
func (s *suite) largeObjects(t *testing.T) {
	env := s.env
	ctx := framework.Context(t, 3*time.Minute)
	const ns, n, secretSize, objectSize = "badinput-large", 4, 1 << 20, 1_400_000
	env.CreateNamespace(t, ns)
	for i := range n {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("large-%d", i), Labels: map[string]string{"index": fmt.Sprint(i)}},
			Data:       map[string][]byte{"blob": randomBytes(t, secretSize)},
		}
		if _, err := env.Kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create secret %d: %v", i, err)
		}
	}
	storeUnencrypted(t, env, ns)
	secretsPrefix := "/registry/secrets/" + ns + "/"
	env.ExpectStored(t, secretsPrefix, map[string]int{"v1": n})
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	secretsBefore := inNamespace(env.TakeSnapshot(t, secrets), ns)

	r := framework.Resource{Group: "large.example.com", Plural: "largegadgets", Kind: "LargeGadget"}
	env.CreateResource(t, r)
	for i := range n {
		obj := r.Object("v1", fmt.Sprintf("large-%d", i), i)
		// Base64 of random bytes: a string JSON stores as it is.
		blob := base64.StdEncoding.EncodeToString(randomBytes(t, objectSize*3/4))
		if err := unstructured.SetNestedField(obj.Object, blob, "data", "blob"); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Dynamic.Resource(r.GVR("v1")).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %d: %v", r.Kind, i, err)
		}
	}
	for key, raw := range env.RawValues(t, r.EtcdPrefix()) {
		if len(raw) < objectSize || len(raw) > 1536<<10 {
			t.Fatalf("%s holds %d bytes, want between %d and etcd's limit", key, len(raw), objectSize)
		}
	}
	env.FlipStorage(t, r)
	objectsBefore := env.TakeSnapshot(t, r.GVR("v1"))

	counted, received := framework.CountingBytes(env.Config)
	retries := &retryCounter{}
	m, requests := framework.NewMigrator(t, counted, migrator.Options{Observer: retries})
	for _, gvr := range []schema.GroupVersionResource{secrets, r.GVR("v1")} {
		res, err := m.Run(ctx, migrator.Request{Resource: gvr})
		if err != nil {
			t.Fatalf("migrate %s: %v", gvr.Resource, err)
		}
		if p := res.Progress; p.Migrated() != n || p.Failed != 0 {
			t.Errorf("%s: progress %+v, want %d rewritten", gvr.Resource, p, n)
		}
	}
	env.ExpectStored(t, secretsPrefix, map[string]int{"encrypted:aescbc:" + s.encryptionKey: n})
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	if diff := secretsBefore.Diff(inNamespace(env.TakeSnapshot(t, secrets), ns)); diff != "" {
		t.Errorf("secrets changed (-before +after):\n%s", diff)
	}
	env.ExpectUnchanged(t, r.GVR("v1"), objectsBefore)
	// Discovery, two lists and the writes, all of metadata: far below the
	// size of a single object.
	total := n * (secretSize + objectSize)
	if got := received.Received(); got > 128<<10 {
		t.Errorf("svm received %d bytes for %d bytes of objects: more than metadata", got, total)
	} else {
		t.Logf("svm received %d bytes while rewriting %d bytes of objects", got, total)
	}
	writes := requests.Count("PATCH")
	if writes != 2*n {
		t.Errorf("%d writes, want %d", writes, 2*n)
	}
	framework.Scenario{Name: "objects near the size limit", Objects: 2 * n, Writes: writes, Retries: int(retries.n.Load()), Verified: !t.Failed()}.Report(t)
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// storeUnencrypted replaces every Secret of namespace in etcd by its plain
// protobuf encoding, what kube-apiserver stored before encryption at rest
// was configured. The identity provider, listed after the key, still reads
// it, and the API shows the same content.
func storeUnencrypted(t *testing.T, env *framework.Env, namespace string) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	encoder := protobuf.NewSerializer(framework.Scheme, framework.Scheme)
	list, err := env.Kube.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		secret := &list.Items[i]
		secret.ResourceVersion = "" // etcd's revision stands for it
		secret.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}
		var buf bytes.Buffer
		if err := encoder.Encode(secret, &buf); err != nil {
			t.Fatalf("encode %s: %v", secret.Name, err)
		}
		key := "/registry/secrets/" + namespace + "/" + secret.Name
		if _, err := env.Etcd.Put(ctx, key, buf.String()); err != nil {
			t.Fatalf("write %s: %v", key, err)
		}
	}
}

// inNamespace keeps the objects of namespace, so that a scenario's check
// does not depend on what others create in the shared control plane.
func inNamespace(snap framework.Snapshot, namespace string) framework.Snapshot {
	out := framework.Snapshot{}
	for key, obj := range snap {
		if strings.HasPrefix(key, namespace+"/") {
			out[key] = obj
		}
	}
	return out
}
