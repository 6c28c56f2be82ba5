package encryption

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/apiservers"
	"github.com/svm-project/svm/internal/controller/round"
	"github.com/svm-project/svm/internal/health"
	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/rotation"
	"github.com/svm-project/svm/internal/scheme"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	config1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	config2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// apiServer is a kube-apiserver as the controller sees it: an identity
// lease, and /metrics telling the encryption configuration it loaded.
type apiServer struct {
	id       string
	config   string
	loadedAt time.Time
	// unreadable makes its /metrics answer 503, as a server restarting does.
	unreadable bool
	// kms is the KMS v2 provider's keys as its envelope metrics tell
	// them, and kmsOK whether its kms-providers check answers ok.
	kms   []kmsSeries
	kmsOK bool
}

// kmsSeries is one key of KMS v2 provider kms1 on a server: when its
// plugin last answered it on a Status call, and when the server last
// wrote under it (zero for never).
type kmsSeries struct {
	key             string
	status, written time.Time
}

// envelopeMetrics is what kube-apiserver serves on /metrics of the keys of
// the server of hash.
func envelopeMetrics(hash string, keys []kmsSeries) string {
	if len(keys) == 0 {
		return ""
	}
	seconds := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixNano())/1e9, 'e', -1, 64) }
	status := "# HELP apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds [ALPHA] The last time in seconds when a keyID was returned by the Status RPC call.\n" +
		"# TYPE apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds gauge\n"
	used := "# HELP apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds [ALPHA] The last time in seconds when a keyID was used.\n" +
		"# TYPE apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds gauge\n"
	for _, k := range keys {
		status += fmt.Sprintf("apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds{apiserver_id_hash=%q,key_id_hash=%q,provider_name=\"kms1\"} %s\n", hash, k.key, seconds(k.status))
		if !k.written.IsZero() {
			used += fmt.Sprintf("apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds{apiserver_id_hash=%q,key_id_hash=%q,provider_name=\"kms1\",transformation_type=\"to_storage\"} %s\n", hash, k.key, seconds(k.written))
		}
	}
	return used + status
}

// metricsOf is what kube-apiserver serves on /metrics about its
// encryption configuration, among series the controller does not read.
func metricsOf(s apiServer) string {
	hash := apiservers.IDHash(s.id)
	loaded := strconv.FormatFloat(float64(s.loadedAt.Unix()), 'e', -1, 64)
	return `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 12
# HELP apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds [ALPHA] Timestamp of the last successful or failed automatic reload of encryption configuration split by apiserver identity.
# TYPE apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds gauge
apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds{apiserver_id_hash="` + hash + `",status="success"} ` + loaded + `
# HELP apiserver_encryption_config_controller_last_config_info [ALPHA] Information about the last applied encryption configuration with hash as label, split by apiserver identity.
# TYPE apiserver_encryption_config_controller_last_config_info gauge
apiserver_encryption_config_controller_last_config_info{apiserver_id_hash="` + hash + `",hash="` + s.config + `"} 1
# HELP process_start_time_seconds [ALPHA] Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.7e+09
` + envelopeMetrics(hash, s.kms)
}

// serve starts an HTTPS server answering /metrics as the server s returns
// at the time would.
func serve(t *testing.T, s func() apiServer) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := s()
		if r.URL.Path == "/readyz/kms-providers" && now.kms != nil {
			if !now.kmsOK {
				http.Error(w, "[-]kms-providers failed: reason withheld", http.StatusInternalServerError)
				return
			}
			fmt.Fprint(w, "ok")
			return
		}
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		if now.unreadable {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprint(w, metricsOf(now))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func identityLease(id string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: id, Namespace: apiservers.LeaseNamespace,
			Labels: map[string]string{apiservers.IdentityLabel: "kube-apiserver"},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

// served serves Secrets and ConfigMaps, and a custom resource.
func served() *fakediscovery.FakeDiscovery {
	verbs := metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	return &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{{
		GroupVersion: "v1",
		APIResources: []metav1.APIResource{
			{Name: "configmaps", SingularName: "configmap", Namespaced: true, Kind: "ConfigMap", Verbs: verbs},
			{Name: "secrets", SingularName: "secret", Namespaced: true, Kind: "Secret", Verbs: verbs},
		},
	}, {
		GroupVersion: "example.com/v1",
		APIResources: []metav1.APIResource{{Name: "widgets", SingularName: "widget", Namespaced: true, Kind: "Widget", Verbs: verbs}},
	}}}}
}

func storageState(resource string, e *migrationv1alpha1.StorageEncryption) *migrationv1alpha1.StorageState {
	return &migrationv1alpha1.StorageState{
		ObjectMeta: metav1.ObjectMeta{Name: resource},
		Spec:       migrationv1alpha1.StorageStateSpec{Resource: migrationv1alpha1.GroupResource{Resource: resource}},
		Status:     migrationv1alpha1.StorageStateStatus{Encryption: e},
	}
}

// reencryption is one of the controller's migrations of a core resource
// under config, created at created; ended, when set, is its final
// condition.
func reencryption(name, resource, config string, created time.Time, ended *migrationv1alpha1.MigrationCondition) *migrationv1alpha1.StorageVersionMigration {
	m := &migrationv1alpha1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created),
			Labels:      map[string]string{rotation.CreatedByLabel: rotation.CreatedByValue},
			Annotations: map[string]string{rotation.ConfigHashAnnotation: config},
		},
		Spec: migrationv1alpha1.StorageVersionMigrationSpec{Resource: migrationv1alpha1.GroupVersionResource{Version: "v1", Resource: resource}},
	}
	if ended != nil {
		m.Status.Conditions = []migrationv1alpha1.MigrationCondition{*ended}
	}
	return m
}

func condition(t migrationv1alpha1.MigrationConditionType, at time.Time) *migrationv1alpha1.MigrationCondition {
	return &migrationv1alpha1.MigrationCondition{Type: t, Status: corev1.ConditionTrue, LastUpdateTime: metav1.NewTime(at)}
}

// env is a controller over fakes of everything it reads and writes, and
// real HTTPS servers for the API servers' metrics.
type env struct {
	c *Controller
	// servers are the API servers as their metrics tell them now.
	mu       sync.Mutex
	servers  []apiServer
	client   client.Client
	clock    *clocktesting.FakeClock
	recorder *events.FakeRecorder
	disc     *fakediscovery.FakeDiscovery
}

type setup struct {
	servers   []apiServer
	resources []string
	objects   []client.Object
	// statusUpdate, if set, stands in for the API server's answer to
	// status updates.
	statusUpdate func() error
}

func newEnv(t *testing.T, s setup) *env {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	e := &env{servers: slices.Clone(s.servers)}
	var endpoints []string
	var leases []runtime.Object
	var ca []byte
	for i, srv := range s.servers {
		ts := serve(t, func() apiServer { e.mu.Lock(); defer e.mu.Unlock(); return e.servers[i] })
		endpoints = append(endpoints, ts.URL)
		ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
		leases = append(leases, identityLease(srv.id, t0.Add(-5*time.Second)))
	}
	funcs := interceptor.Funcs{
		// The API server stamps what it creates; Decide reads the stamp.
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			obj.SetCreationTimestamp(metav1.NewTime(clk.Now()))
			return c.Create(ctx, obj, opts...)
		},
	}
	if s.statusUpdate != nil {
		funcs.SubResourceUpdate = func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return s.statusUpdate()
		}
	}
	cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithStatusSubresource(&migrationv1alpha1.StorageState{}, &migrationv1alpha1.StorageVersionMigration{}).
		WithObjects(s.objects...).WithInterceptorFuncs(funcs).Build()
	e.client, e.clock, e.recorder, e.disc = cl, clk, events.NewFakeRecorder(100), served()
	e.c = &Controller{
		Client: cl, Reader: cl, Leases: kubefake.NewClientset(leases...).CoordinationV1(), Discovery: e.disc,
		Servers:   kubeclients.NewEndpoints(&rest.Config{Host: endpoints[0], TLSClientConfig: rest.TLSClientConfig{CAData: ca}}),
		Endpoints: endpoints, Resources: s.resources,
		Clock: clk, Recorder: e.recorder,
	}
	e.c.setDefaults()
	return e
}

// setServer changes what the i-th API server's metrics tell.
func (e *env) setServer(i int, s apiServer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.servers[i] = s
}

func (e *env) reconcile(t *testing.T) reconcile.Result {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	res, err := e.c.Reconcile(ctx, round.Request)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (e *env) migrations(t *testing.T) []migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := e.client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func (e *env) encryption(t *testing.T, state string) *migrationv1alpha1.StorageEncryption {
	t.Helper()
	var s migrationv1alpha1.StorageState
	if err := e.client.Get(context.Background(), client.ObjectKey{Name: state}, &s); err != nil {
		t.Fatal(err)
	}
	if s.Status.Encryption == nil {
		t.Fatalf("storage state %s records no encryption", state)
	}
	return s.Status.Encryption
}

// reasons are the reasons of the events recorded so far.
func (e *env) reasons() []string {
	var out []string
	for {
		select {
		case ev := <-e.recorder.Events:
			out = append(out, strings.Fields(ev)[1])
		default:
			return out
		}
	}
}

func TestReconcileCreatesReencryptionWhenAllServersAgree(t *testing.T) {
	loaded := t0.Add(-10 * time.Minute)
	e := newEnv(t, setup{
		servers:   []apiServer{{id: "apiserver-a", config: config2, loadedAt: loaded}, {id: "apiserver-b", config: config2, loadedAt: loaded}},
		resources: []string{"secrets", "configmaps", "widgets.example.com"},
		objects: []client.Object{
			storageState("secrets", &migrationv1alpha1.StorageEncryption{ConfigHash: config1, RewrittenConfigHash: config1}),
			storageState("configmaps", nil),
		},
	})
	if got, want := e.reconcile(t), (reconcile.Result{RequeueAfter: time.Minute}); got != want {
		t.Errorf("Reconcile = %+v, want %+v", got, want)
	}
	ms := e.migrations(t)
	var created []string
	for _, m := range ms {
		created = append(created, m.Spec.Resource.Resource)
		if !rotation.IsOwned(&m) || m.Annotations[rotation.ConfigHashAnnotation] != config2 || m.Spec.Resource.Version != "v1" ||
			!strings.HasPrefix(m.Name, m.Spec.Resource.Resource+"-reencrypt-") {
			t.Errorf("migration %s: labels %v, annotations %v, resource %+v; want a re-encryption of its resource under %s",
				m.Name, m.Labels, m.Annotations, m.Spec.Resource, config2)
		}
	}
	slices.Sort(created)
	// Widgets have no StorageState yet: they wait for the trigger.
	if want := []string{"configmaps", "secrets"}; !slices.Equal(created, want) {
		t.Errorf("re-encryptions of %v, want one of each of %v", created, want)
	}
	for _, state := range []string{"secrets", "configmaps"} {
		got := e.encryption(t, state)
		if got.ConfigHash != config2 || !strings.HasPrefix(got.Message, "Re-encrypting every object under configuration "+config2) {
			t.Errorf("%s: status.encryption = %+v, want configuration %s, re-encrypting", state, got, config2)
		}
	}
	if got := e.encryption(t, "secrets").RewrittenConfigHash; got != config1 {
		t.Errorf("secrets: rewritten under %q, want the earlier record %s kept until the re-encryption succeeds", got, config1)
	}
	if got := e.reasons(); !slices.Equal(got, []string{ReasonReencryptionCreated, ReasonReencryptionCreated}) {
		t.Errorf("events %v, want two %s", got, ReasonReencryptionCreated)
	}

	// The next look sees the re-encryptions running and makes no more.
	e.clock.Step(time.Minute)
	e.reconcile(t)
	if got := len(e.migrations(t)); got != 2 {
		t.Errorf("%d migrations after a second round, want the 2 of the first", got)
	}
}

func TestReconcileWaitsWhileServersDisagree(t *testing.T) {
	loaded := t0.Add(-10 * time.Minute)
	running := reencryption("secrets-reencrypt-old", "secrets", config1, t0.Add(-time.Minute), nil)
	e := newEnv(t, setup{
		servers:   []apiServer{{id: "apiserver-a", config: config2, loadedAt: loaded}, {id: "apiserver-b", config: config1, loadedAt: loaded}},
		resources: []string{"secrets"},
		objects: []client.Object{
			storageState("secrets", &migrationv1alpha1.StorageEncryption{ConfigHash: config1, RewrittenConfigHash: config1}),
			running,
		},
	})
	if got, want := e.reconcile(t), (reconcile.Result{RequeueAfter: time.Minute}); got != want {
		t.Errorf("Reconcile = %+v, want %+v", got, want)
	}
	// A re-encryption under a configuration some server no longer writes
	// with would be undone by it: it is stopped, and none is created.
	if ms := e.migrations(t); len(ms) != 0 {
		t.Errorf("migrations %v, want none while the API servers disagree", ms)
	}
	got := e.encryption(t, "secrets")
	if got.ConfigHash != "" || !strings.HasPrefix(got.Message, "Waiting: ") || !strings.Contains(got.Message, "different encryption configurations") {
		t.Errorf("status.encryption = %+v, want no configuration and a message that it waits for the API servers to agree", got)
	}
	if got.RewrittenConfigHash != config1 {
		t.Errorf("rewritten under %q, want the record %s kept", got.RewrittenConfigHash, config1)
	}
	if got := e.reasons(); !slices.Equal(got, []string{ReasonSuperseded, ReasonWaiting}) {
		t.Errorf("events %v, want %s then %s", got, ReasonSuperseded, ReasonWaiting)
	}
}

func TestReconcileKeepsReencryptionWhileAServerCannotBeRead(t *testing.T) {
	// Both servers have configuration 2, and svm re-encrypts under it.
	// Then one server's metrics cannot be read for a look (a restart, a
	// timeout): that is no news, and the re-encryption must go on, neither
	// stopped nor made again once the server answers.
	loaded := t0.Add(-10 * time.Minute)
	a := apiServer{id: "apiserver-a", config: config2, loadedAt: loaded}
	b := apiServer{id: "apiserver-b", config: config2, loadedAt: loaded}
	e := newEnv(t, setup{
		servers: []apiServer{a, b}, resources: []string{"secrets"},
		objects: []client.Object{storageState("secrets", nil)},
	})
	e.reconcile(t)
	first := e.migrations(t)
	if len(first) != 1 {
		t.Fatalf("%d migrations after the first look, want one re-encryption", len(first))
	}
	name := first[0].Name
	e.reasons()

	e.clock.Step(time.Minute)
	unreadable := b
	unreadable.unreadable = true
	e.setServer(1, unreadable)
	e.reconcile(t)
	if ms := e.migrations(t); len(ms) != 1 || ms[0].Name != name {
		t.Errorf("migrations %v while a server cannot be read, want %s alone, still running", names(ms), name)
	}
	got := e.encryption(t, "secrets")
	if !strings.HasPrefix(got.Message, "Waiting: ") || !strings.Contains(got.Message, name+" (configuration "+config2+") goes on") {
		t.Errorf("message %q, want it to wait for the server and say %s goes on", got.Message, name)
	}
	if got := e.reasons(); slices.Contains(got, ReasonSuperseded) {
		t.Errorf("events %v, want no %s", got, ReasonSuperseded)
	}

	e.clock.Step(time.Minute)
	e.setServer(1, b)
	e.reconcile(t)
	if ms := e.migrations(t); len(ms) != 1 || ms[0].Name != name {
		t.Errorf("migrations %v once the server answers again, want %s alone", names(ms), name)
	}
	if got := e.encryption(t, "secrets"); got.ConfigHash != config2 || !strings.Contains(got.Message, "(migration "+name+")") {
		t.Errorf("status.encryption = %+v, want configuration %s, re-encrypting with %s", got, config2, name)
	}
}

// names are the names of ms.
func names(ms []migrationv1alpha1.StorageVersionMigration) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func TestReconcileRecordsSucceededReencryption(t *testing.T) {
	loaded := t0.Add(-time.Hour)
	succeeded := t0.Add(-time.Minute)
	e := newEnv(t, setup{
		servers:   []apiServer{{id: "apiserver-a", config: config2, loadedAt: loaded}},
		resources: []string{"secrets"},
		objects: []client.Object{
			storageState("secrets", &migrationv1alpha1.StorageEncryption{ConfigHash: config2, RewrittenConfigHash: config1}),
			reencryption("secrets-reencrypt-abcde", "secrets", config2, t0.Add(-30*time.Minute), condition(migrationv1alpha1.MigrationSucceeded, succeeded)),
		},
	})
	if got, want := e.reconcile(t), (reconcile.Result{RequeueAfter: time.Minute}); got != want {
		t.Errorf("Reconcile = %+v, want %+v", got, want)
	}
	got := e.encryption(t, "secrets")
	if got.RewrittenConfigHash != config2 || got.RewrittenBy != "secrets-reencrypt-abcde" || got.RewrittenTime == nil || !got.RewrittenTime.Time.Equal(succeeded) {
		t.Errorf("status.encryption = %+v, want rewritten under %s by secrets-reencrypt-abcde at %s", got, config2, succeeded)
	}
	if n := len(e.migrations(t)); n != 1 {
		t.Errorf("%d migrations, want the one that succeeded alone", n)
	}
	if got := e.reasons(); !slices.Equal(got, []string{ReasonReencrypted}) {
		t.Errorf("events %v, want %s", got, ReasonReencrypted)
	}
}

func TestReconcileCreditsNoMigrationMadeBeforeTheServersChanged(t *testing.T) {
	// The API server has had configuration 1 for an hour, and a
	// migration of Secrets made ten minutes ago re-encrypted them under
	// it. Then it loads configuration 2, and the next look reads its
	// metrics torn: the new hash, with the time of the reload before. The
	// migration of ten minutes ago, made before the last look saw
	// configuration 1, must not be taken for a re-encryption under 2.
	loaded := t0.Add(-time.Hour)
	e := newEnv(t, setup{
		servers:   []apiServer{{id: "apiserver-a", config: config1, loadedAt: loaded}},
		resources: []string{"secrets"},
		objects: []client.Object{
			storageState("secrets", &migrationv1alpha1.StorageEncryption{ConfigHash: config1, RewrittenConfigHash: config1}),
			reencryption("secrets-first-round", "secrets", "", t0.Add(-10*time.Minute), condition(migrationv1alpha1.MigrationSucceeded, t0.Add(-9*time.Minute))),
		},
	})
	e.reconcile(t)
	if got := e.encryption(t, "secrets"); got.RewrittenConfigHash != config1 || len(e.migrations(t)) != 1 {
		t.Fatalf("status.encryption = %+v with %d migrations, want configuration 1 rewritten and nothing new", got, len(e.migrations(t)))
	}
	e.clock.Step(time.Minute)
	e.setServer(0, apiServer{id: "apiserver-a", config: config2, loadedAt: loaded})
	e.reconcile(t)
	got := e.encryption(t, "secrets")
	if got.RewrittenConfigHash != config1 || got.ConfigHash != config2 {
		t.Errorf("status.encryption = %+v, want configuration 2 current and 1 still the one rewritten", got)
	}
	var created []string
	for _, m := range e.migrations(t) {
		if m.Annotations[rotation.ConfigHashAnnotation] == config2 {
			created = append(created, m.Name)
		}
	}
	if len(created) != 1 {
		t.Errorf("re-encryptions under configuration 2: %v, want one", created)
	}
}

func TestReconcileRetriesFailedReencryptionAfterBackoff(t *testing.T) {
	loaded := t0.Add(-time.Hour)
	e := newEnv(t, setup{
		servers:   []apiServer{{id: "apiserver-a", config: config2, loadedAt: loaded}},
		resources: []string{"secrets"},
		objects: []client.Object{
			storageState("secrets", &migrationv1alpha1.StorageEncryption{ConfigHash: config2}),
			reencryption("secrets-reencrypt-abcde", "secrets", config2, t0.Add(-5*time.Minute), condition(migrationv1alpha1.MigrationFailed, t0.Add(-30*time.Second))),
		},
	})
	e.c.Interval, e.c.RetryBase = 10*time.Minute, 2*time.Minute
	// One failure waits RetryBase from when it failed.
	if got, want := e.reconcile(t), (reconcile.Result{RequeueAfter: 90 * time.Second}); got != want {
		t.Errorf("Reconcile = %+v, want %+v", got, want)
	}
	if n := len(e.migrations(t)); n != 1 {
		t.Errorf("%d migrations, want no new one before the retry is due", n)
	}
	if got := e.encryption(t, "secrets").Message; !strings.Contains(got, "failed 1 time(s)") {
		t.Errorf("message %q, want it to tell of the failure and the retry", got)
	}

	e.clock.Step(90 * time.Second)
	if got, want := e.reconcile(t), (reconcile.Result{RequeueAfter: 10 * time.Minute}); got != want {
		t.Errorf("Reconcile when the retry is due = %+v, want %+v", got, want)
	}
	if n := len(e.migrations(t)); n != 2 {
		t.Errorf("%d migrations when the retry is due, want a new one besides the failed one", n)
	}
}

func TestReconcileRequeuesWithinInterval(t *testing.T) {
	loaded := t0.Add(-time.Hour)
	failed := reencryption("secrets-reencrypt-abcde", "secrets", config2, t0.Add(-5*time.Minute), condition(migrationv1alpha1.MigrationFailed, t0.Add(-30*time.Second)))
	for _, tc := range []struct {
		name  string
		setup setup
		// prepare breaks what the round reads.
		prepare func(*env)
		want    time.Duration
	}{{
		name: "a retry due after the next look",
		setup: setup{objects: []client.Object{
			storageState("secrets", &migrationv1alpha1.StorageEncryption{ConfigHash: config2}), failed,
		}},
		prepare: func(e *env) { e.c.RetryBase = time.Hour },
		want:    time.Minute,
	}, {
		name:    "discovery fails",
		setup:   setup{objects: []client.Object{storageState("secrets", nil)}},
		prepare: func(e *env) { e.disc.PrependReactor("get", "group", errorReactor) },
		want:    time.Minute,
	}, {
		name: "a status update conflicts",
		setup: setup{
			objects: []client.Object{storageState("secrets", nil)},
			statusUpdate: func() error {
				return apierrors.NewConflict(schema.GroupResource{Group: "migration.k8s.io", Resource: "storagestates"}, "secrets", errors.New("changed"))
			},
		},
		want: applyRetry,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup.servers = []apiServer{{id: "apiserver-a", config: config2, loadedAt: loaded}}
			tc.setup.resources = []string{"secrets"}
			e := newEnv(t, tc.setup)
			if tc.prepare != nil {
				tc.prepare(e)
			}
			got := e.reconcile(t)
			if got.RequeueAfter != tc.want || got.RequeueAfter > e.c.Interval {
				t.Errorf("RequeueAfter = %s, want %s (interval %s)", got.RequeueAfter, tc.want, e.c.Interval)
			}
		})
	}
}

func errorReactor(clienttesting.Action) (bool, runtime.Object, error) {
	return true, nil, errors.New("the server is currently unable to handle the request")
}

func TestReconcileTracksLiveness(t *testing.T) {
	e := newEnv(t, setup{
		servers:   []apiServer{{id: "apiserver-a", config: config2, loadedAt: t0.Add(-time.Hour)}},
		resources: []string{"secrets"},
	})
	tracker := health.NewTracker(e.clock, true)
	e.c.Health = tracker
	live := func() error { return health.Live(tracker.State(true, false)) }
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = round.Liveness(tracker, loopName, e.c.Interval).Start(ctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(tracker.State(true, false).Loops) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the rounds are not tracked while leading")
		}
		time.Sleep(time.Millisecond)
	}

	e.reconcile(t)
	stall := health.StallAfter(e.c.Interval)
	e.clock.Step(stall + time.Second)
	if err := live(); err == nil || !strings.Contains(err.Error(), loopName+" stuck") {
		t.Errorf("liveness with no round for %s: %v, want the rounds stuck", stall+time.Second, err)
	}
	e.reconcile(t)
	if err := live(); err != nil {
		t.Errorf("liveness right after a round: %v", err)
	}

	// Once the manager stops, no round is due.
	cancel()
	<-stopped
	e.clock.Step(stall + time.Second)
	if err := live(); err != nil {
		t.Errorf("liveness after the manager stopped: %v", err)
	}
}

func TestFinishedChanged(t *testing.T) {
	at := t0
	own := reencryption("secrets-reencrypt-abcde", "secrets", config2, at, nil)
	ownDone := reencryption("secrets-reencrypt-abcde", "secrets", config2, at, condition(migrationv1alpha1.MigrationSucceeded, at))
	ownFailed := reencryption("secrets-reencrypt-abcde", "secrets", config2, at, condition(migrationv1alpha1.MigrationFailed, at))
	others, othersDone := own.DeepCopy(), ownDone.DeepCopy()
	others.Labels, othersDone.Labels = nil, nil
	for _, tc := range []struct {
		name          string
		before, after client.Object
		want          bool
	}{
		{"an own re-encryption succeeds", own, ownDone, true},
		{"an own re-encryption fails", own, ownFailed, true},
		{"an own re-encryption goes on", own, own, false},
		{"another's migration succeeds", others, othersDone, false},
		{"not a migration", storageState("secrets", nil), storageState("secrets", nil), false},
	} {
		if got := finishedChanged(tc.before, tc.after); got != tc.want {
			t.Errorf("%s: finishedChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Key ID hashes as kube-apiserver labels them (of key IDs "A" and "B").
const (
	keyA = "sha256:559aead08264d5795d3909718cdd05abd49572e84fe55590eef31a88a08fdffd"
	keyB = "sha256:df7e70e5021544f4834bbee64a9e3789febc4be81470df629cad6ddb03320a5c"
)

func TestReconcileReencryptsAfterAKMSKeyRotation(t *testing.T) {
	loaded := t0.Add(-time.Hour)
	onA := []kmsSeries{{key: keyA, status: t0.Add(-30 * time.Second), written: t0.Add(-10 * time.Second)}}
	recorded := []migrationv1alpha1.KMSKey{{Provider: "kms1", KeyIDHash: keyA}}
	e := newEnv(t, setup{
		servers: []apiServer{
			{id: "apiserver-a", config: config2, loadedAt: loaded, kms: onA, kmsOK: true},
			{id: "apiserver-b", config: config2, loadedAt: loaded, kms: onA, kmsOK: true},
		},
		resources: []string{"secrets"},
		objects: []client.Object{storageState("secrets", &migrationv1alpha1.StorageEncryption{
			ConfigHash: config2, KMSKeys: recorded, RewrittenConfigHash: config2, RewrittenKMSKeys: recorded, RewrittenBy: "secrets-a",
		})},
	})
	e.reconcile(t)
	if n := len(e.migrations(t)); n != 0 {
		t.Fatalf("%d migrations while the record is current, want none", n)
	}

	// The plugin answers key B. Server a swaps and writes under it;
	// server b answered B, has written nothing since, and its check fails.
	e.clock.Step(time.Minute)
	swapped := func(status, written time.Time) []kmsSeries {
		return []kmsSeries{{key: keyA, status: t0.Add(-30 * time.Second), written: t0.Add(-10 * time.Second)}, {key: keyB, status: status, written: written}}
	}
	e.setServer(0, apiServer{id: "apiserver-a", config: config2, loadedAt: loaded, kms: swapped(t0.Add(30*time.Second), t0.Add(40*time.Second)), kmsOK: true})
	e.setServer(1, apiServer{id: "apiserver-b", config: config2, loadedAt: loaded, kms: swapped(t0.Add(35*time.Second), time.Time{})})
	e.reconcile(t)
	if n := len(e.migrations(t)); n != 0 {
		t.Fatalf("%d migrations while server b is not seen writing under key B, want none", n)
	}
	if got := e.encryption(t, "secrets").Message; !strings.Contains(got, "API server apiserver-b's KMS v2 provider kms1 answers key "+keyB) {
		t.Errorf("message %q, want it to name server b and provider kms1", got)
	}

	// Server b writes under key B: every server is seen on it.
	e.clock.Step(time.Minute)
	e.setServer(1, apiServer{id: "apiserver-b", config: config2, loadedAt: loaded, kms: swapped(t0.Add(95*time.Second), t0.Add(100*time.Second))})
	e.reconcile(t)
	ms := e.migrations(t)
	if len(ms) != 1 || ms[0].Annotations[rotation.KMSKeysAnnotation] != "kms1="+keyB || ms[0].Annotations[rotation.ConfigHashAnnotation] != config2 {
		t.Fatalf("migrations %+v, want one re-encryption under configuration 2 and key B", ms)
	}
	if got := e.encryption(t, "secrets"); len(got.KMSKeys) != 1 || got.KMSKeys[0].KeyIDHash != keyB || got.RewrittenKMSKeys[0].KeyIDHash != keyA {
		t.Errorf("status.encryption = %+v, want key B current and key A still the one rewritten", got)
	}

	// The servers renew key B's Status time every minute; the
	// re-encryption made at the look that first saw them agree is
	// credited all the same.
	e.clock.Step(3 * time.Minute)
	e.setServer(0, apiServer{id: "apiserver-a", config: config2, loadedAt: loaded, kms: swapped(t0.Add(270*time.Second), t0.Add(280*time.Second)), kmsOK: true})
	e.setServer(1, apiServer{id: "apiserver-b", config: config2, loadedAt: loaded, kms: swapped(t0.Add(275*time.Second), t0.Add(100*time.Second))})
	m := ms[0]
	m.Status.Conditions = []migrationv1alpha1.MigrationCondition{*condition(migrationv1alpha1.MigrationSucceeded, e.clock.Now())}
	if err := e.client.Status().Update(context.Background(), &m); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	got := e.encryption(t, "secrets")
	if len(got.RewrittenKMSKeys) != 1 || got.RewrittenKMSKeys[0].KeyIDHash != keyB || got.RewrittenBy != m.Name {
		t.Errorf("status.encryption = %+v, want rewritten under key B by %s", got, m.Name)
	}
	if n := len(e.migrations(t)); n != 1 {
		t.Errorf("%d migrations, want the one that succeeded alone", n)
	}
}

// TestLookAsksTheKMSCheckOnlyAtAServersOwnAddress: the kms-providers check
// counts for the server whose metrics were read only where the address
// is that server's: through a load balancer, another could answer it.
func TestLookAsksTheKMSCheckOnlyAtAServersOwnAddress(t *testing.T) {
	// Nothing written under key A yet: the check alone can tell.
	onA := []kmsSeries{{key: keyA, status: t0.Add(-30 * time.Second)}}
	e := newEnv(t, setup{servers: []apiServer{{id: "apiserver-a", config: config2, loadedAt: t0.Add(-time.Hour), kms: onA, kmsOK: true}}})
	_, ctx := ktesting.NewTestContext(t)
	leases := func(ids ...string) coordinationv1client.LeasesGetter {
		var objs []runtime.Object
		for _, id := range ids {
			objs = append(objs, identityLease(id, t0.Add(-5*time.Second)))
		}
		return kubefake.NewClientset(objs...).CoordinationV1()
	}
	for _, tc := range []struct {
		name    string
		given   []string
		leases  []string
		waiting string // "" for agreed
	}{
		{name: "given with --apiserver-endpoints", given: e.c.Endpoints, leases: []string{"apiserver-a"}},
		{name: "the kubeconfig's address, one server running", leases: []string{"apiserver-a"}},
		{name: "the kubeconfig's address, two servers running", leases: []string{"apiserver-a", "apiserver-b"},
			waiting: "its kms-providers check was not asked: it was read through " + e.c.Servers.Host() + ", which may be a load balancer's address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Look(ctx, leases(tc.leases...), e.c.Servers, tc.given, e.clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			if a.Agreed != (tc.waiting == "") || !strings.Contains(a.Waiting, tc.waiting) {
				t.Errorf("agreed %v, waiting %q; want waiting %q", a.Agreed, a.Waiting, tc.waiting)
			}
		})
	}
}
