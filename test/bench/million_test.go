package bench

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/svm-project/svm/test/framework"
)

// BenchmarkMillion migrates ever more Secrets after an encryption key
// rotation with svm at its defaults, one control plane growing from size to
// size, each pass verified in etcd: the series that shows whether svm's
// memory stays flat and its rate holds up to a million objects of one
// resource. SVM_BENCH_MILLION lists the sizes (default
// "10000,100000,1000000"); the table goes to $SVM_BENCH_RESULTS. It is not
// part of BenchmarkSuite: its last pass alone takes about half an hour on
// two cores. Run it with `make bench BENCH=BenchmarkMillion`.
func BenchmarkMillion(b *testing.B) {
	svmBinary = framework.SVMBinary(b)
	sizes := envRising(b, "SVM_BENCH_MILLION", []int{10000, 100000, 1000000}, "object counts, such as 10000,100000,1000000")
	w, writing := rotatedSecrets(b, "")
	// After its restart with the new key, an API server with a million
	// Secrets takes longer than settleLimit to fill its watch cache and
	// quiet down; a pass measured before would count that as idle.
	rotate := w.stale
	w.stale = func(b *testing.B) (string, map[string]int) {
		prefix, want := rotate(b)
		if waited, err := settle(w.env.CP.APIServerPID(), 15*time.Minute); err != nil {
			b.Fatal(err)
		} else {
			b.Logf("the API server was quiet %s after its restart", waited.Round(time.Second))
		}
		return prefix, want
	}
	var series []result
	for _, n := range sizes {
		start := time.Now()
		putSecrets(b, w.env, writing(), w.objects, n)
		b.Logf("%d Secrets stored in etcd in %s", n-w.objects, time.Since(start).Round(time.Second))
		w.objects = n
		w.name = fmt.Sprintf("Secrets after an encryption key rotation, %d (scaling)", n)
		series = append(series, pass(b, w, svmProcess(defaultsName)))
	}
	first, last := series[0], series[len(series)-1]
	ratio := float64(last.peakRSS()) / float64(first.peakRSS())
	targets := []target{{
		what:     fmt.Sprintf("flat memory: svm's peak RSS at %d Secrets within 1.2x of %d", last.objects, first.objects),
		measured: fmt.Sprintf("%.0f MB / %.0f MB = %.2f", float64(last.peakRSS())/1e6, float64(first.peakRSS())/1e6, ratio),
		met:      ratio <= 1.2,
	}}
	writeResults(b, series, []string{scalingNote(series)}, targets)
}

// putSecrets stores the Secrets secret-<from> to secret-<to-1> of namespace
// bench straight into etcd, encrypted under key as kube-apiserver's aescbc
// provider writes them: through the API server, a million creates would
// take longer than their migration. The API server, watching etcd, takes
// them into its watch cache as if they had been created through it.
func putSecrets(b *testing.B, env *framework.Env, key framework.EncryptionKey, from, to int) {
	b.Helper()
	secret, err := base64.StdEncoding.DecodeString(key.Secret)
	if err != nil {
		b.Fatal(err)
	}
	block, err := aes.NewCipher(secret)
	if err != nil {
		b.Fatal(err)
	}
	codec := protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme)
	created := metav1.NewTime(time.Now().Truncate(time.Second))
	ctx := framework.Context(b, 30*time.Minute)
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	// etcd takes at most 128 operations in one transaction.
	const batch = 100
	for first := from; first < to; first += batch {
		g.Go(func() error {
			var ops []clientv3.Op
			for i := first; i < min(first+batch, to); i++ {
				s := &corev1.Secret{
					TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%07d", i), Namespace: "bench", UID: types.UID(uuid.NewUUID()), CreationTimestamp: created},
					Data:       map[string][]byte{"value": []byte("secret")},
					Type:       corev1.SecretTypeOpaque,
				}
				var encoded bytes.Buffer
				if err := codec.Encode(s, &encoded); err != nil {
					return err
				}
				value, err := aescbc(block, key.Name, encoded.Bytes())
				if err != nil {
					return err
				}
				ops = append(ops, clientv3.OpPut("/registry/secrets/bench/"+s.Name, string(value)))
			}
			_, err := env.Etcd.Txn(ctx).Then(ops...).Commit()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatalf("store Secrets in etcd: %v", err)
	}
}

// aescbc encrypts data as kube-apiserver's aescbc provider does: its
// prefix with the key's name, a random IV, and the data padded (PKCS #7)
// and encrypted in CBC mode.
func aescbc(block cipher.Block, keyName string, data []byte) ([]byte, error) {
	pad := aes.BlockSize - len(data)%aes.BlockSize
	plain := append(bytes.Clone(data), bytes.Repeat([]byte{byte(pad)}, pad)...)
	out := make([]byte, aes.BlockSize+len(plain))
	if _, err := rand.Read(out[:aes.BlockSize]); err != nil {
		return nil, err
	}
	cipher.NewCBCEncrypter(block, out[:aes.BlockSize]).CryptBlocks(out[aes.BlockSize:], plain)
	return append([]byte("k8s:enc:aescbc:v1:"+keyName+":"), out...), nil
}
