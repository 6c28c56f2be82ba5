package framework

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/etcdvalue"
)

// EtcdPrefix is where kube-apiserver keeps the objects of gr: built-in
// resources of the core group and a few legacy groups live directly under
// /registry/<resource>/, custom resources under /registry/<group>/<resource>/.
func EtcdPrefix(gr schema.GroupResource) string {
	if gr.Group == "" {
		return "/registry/" + gr.Resource + "/"
	}
	return "/registry/" + gr.Group + "/" + gr.Resource + "/"
}

// Revision is the etcd revision a resourceVersion names, so that two can
// be ordered. kube-apiserver's resourceVersions are etcd revisions; the
// API calls them opaque, which is why only tests compare them.
func Revision(t testing.TB, resourceVersion string) uint64 {
	t.Helper()
	r, err := strconv.ParseUint(resourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q is not an etcd revision: %v", resourceVersion, err)
	}
	return r
}

// CompactEtcd compacts etcd up to its current revision and waits until the
// compaction is done: every older revision, and any list or watch from one,
// is gone.
func (e *Env) CompactEtcd(t testing.TB) {
	t.Helper()
	ctx := Context(t, time.Minute)
	status, err := e.Etcd.Status(ctx, e.CP.EtcdURL)
	if err != nil {
		t.Fatalf("etcd status: %v", err)
	}
	if _, err := e.Etcd.Compact(ctx, status.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact etcd: %v", err)
	}
}

// RawValues reads every raw value under prefix straight from etcd.
func (e *Env) RawValues(t testing.TB, prefix string) map[string][]byte {
	t.Helper()
	ctx := Context(t, 10*time.Minute)
	values := map[string][]byte{}
	// In pages, all at the first page's revision: one snapshot, however
	// many values (a million would not fit one answer).
	key, end, revision := prefix, clientv3.GetPrefixRangeEnd(prefix), int64(0)
	for {
		resp, err := e.Etcd.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(10000), clientv3.WithRev(revision))
		if err != nil {
			t.Fatalf("read etcd %s: %v", prefix, err)
		}
		revision = resp.Header.Revision
		for _, kv := range resp.Kvs {
			values[string(kv.Key)] = kv.Value
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return values
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// StoredVersions reads every value under prefix and counts them by the
// apiVersion they are stored in, or by "encrypted:<provider>:<key>" when
// they are encrypted. It fails the test on a value it cannot explain.
func (e *Env) StoredVersions(t testing.TB, prefix string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, label := range e.storedLabels(t, prefix) {
		counts[label]++
	}
	return counts
}

// storedLabels is, for every key under prefix, what StoredVersions counts
// it as.
func (e *Env) storedLabels(t testing.TB, prefix string) map[string]string {
	t.Helper()
	labels := map[string]string{}
	for key, raw := range e.RawValues(t, prefix) {
		v, err := etcdvalue.Inspect(raw)
		if err != nil {
			t.Fatalf("etcd value %s: %v", key, err)
		}
		if v.Encryption != nil {
			labels[key] = "encrypted:" + v.Encryption.Provider + ":" + v.Encryption.Key
			continue
		}
		labels[key] = v.APIVersion
	}
	return labels
}

// ExpectStored reports an error unless the values under prefix are stored
// exactly as want says (see StoredVersions), naming a few of the keys
// stored otherwise than want allows.
func (e *Env) ExpectStored(t testing.TB, prefix string, want map[string]int) {
	t.Helper()
	labels := e.storedLabels(t, prefix)
	got := map[string]int{}
	for _, label := range labels {
		got[label]++
	}
	diff := cmp.Diff(want, got)
	if diff == "" {
		return
	}
	var extra []string
	for _, key := range slices.Sorted(maps.Keys(labels)) {
		if label := labels[key]; got[label] > want[label] && len(extra) < 10 {
			extra = append(extra, key+" ("+label+")")
		}
	}
	t.Errorf("stored versions under %s (-want +got):\n%s\nstored otherwise than wanted, among others: %s", prefix, diff, strings.Join(extra, ", "))
}

// ModRevisions is the etcd revision at which every key under prefix was
// last written: what changes if and only if etcd stored a new value.
func (e *Env) ModRevisions(t testing.TB, prefix string) map[string]int64 {
	t.Helper()
	resp, err := e.Etcd.Get(Context(t, time.Minute), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("read etcd %s: %v", prefix, err)
	}
	out := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.ModRevision
	}
	return out
}

// ManagedFieldsVersions reads every raw value under prefix, which must be
// custom resources (stored as JSON), and counts the apiVersions their
// managedFields entries name: what server-side apply will need to convert
// to, whatever the API server serves.
func (e *Env) ManagedFieldsVersions(t testing.TB, prefix string) map[string]int {
	t.Helper()
	named := map[string]int{}
	for key, raw := range e.RawValues(t, prefix) {
		var obj struct {
			Metadata struct {
				ManagedFields []struct {
					APIVersion string `json:"apiVersion"`
				} `json:"managedFields"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Fatalf("etcd value %s is not JSON: %v", key, err)
		}
		for _, f := range obj.Metadata.ManagedFields {
			named[f.APIVersion]++
		}
	}
	return named
}
