package framework

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Webhook is a real admission webhook served by the test on loopback,
// which counts its calls.
type Webhook struct {
	calls, subresourceCalls tally
	// probe is the key of the object the helper probed with.
	probe string
	// unregister deletes the webhook's configuration.
	unregister func(context.Context) error
}

// SubresourceCalls is how often the webhook was asked about a write of a
// subresource ("status") of namespace/name.
func (w *Webhook) SubresourceCalls(key string) int { return w.subresourceCalls.get(key) }

// TotalSubresourceCalls is how often it was asked about a subresource's
// write of anything.
func (w *Webhook) TotalSubresourceCalls() int { return w.subresourceCalls.totalBut() }

// Calls is how often the webhook was asked about namespace/name.
func (w *Webhook) Calls(key string) int { return w.calls.get(key) }

// StartDenyingWebhook registers a validating webhook that denies every
// UPDATE of the objects of r named in deny (as namespace/name) and allows
// the rest.
func StartDenyingWebhook(t testing.TB, e *Env, r Resource, deny map[string]bool) *Webhook {
	t.Helper()
	return StartAdmissionWebhook(t, e, AdmissionHook{
		Resource: r,
		Review: func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			key := req.Namespace + "/" + req.Name
			if !deny[key] {
				return &admissionv1.AdmissionResponse{Allowed: true}
			}
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusForbidden, Message: "test policy denies " + key}}
		},
	})
}

// AdmissionHook describes an admission webhook on the UPDATEs of one
// Resource: one that denies (StartDenyingWebhook), changes objects, or is
// slow.
type AdmissionHook struct {
	// Resource is what the webhook is registered for.
	Resource Resource
	// Mutating registers a MutatingWebhookConfiguration, whose answers may
	// carry a JSON patch; otherwise a validating one.
	Mutating bool
	// TimeoutSeconds is how long the API server waits for an answer
	// (1 to 30; 0 means the API server's default of 10).
	TimeoutSeconds int32
	// FailurePolicy is what the API server does when the call fails or
	// times out. Default Fail.
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// Namespace, if set, limits the webhook to the objects of that
	// namespace (a namespaceSelector), where its probe is made: for a
	// resource all tests share, such as Secrets.
	Namespace string
	// Probe, if set, is the object the helper creates and updates until
	// the API server calls the webhook (named webhook-probe); nil makes
	// one of Resource's in v1 (Resource.Object).
	Probe *unstructured.Unstructured
	// Review answers one UPDATE. ctx ends when the API server gives up on
	// the call. It is not asked about the probe the helper uses to see that
	// the API server calls the webhook.
	Review func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse
}

// webhookProbe names the object StartAdmissionWebhook updates until the
// API server calls the webhook.
const webhookProbe = "webhook-probe"

// StartAdmissionWebhook serves hook on loopback, registers it, waits until
// the API server calls it, and removes it when the test ends. The returned
// Webhook counts the calls by namespace/name.
func StartAdmissionWebhook(t testing.TB, e *Env, hook AdmissionHook) *Webhook {
	t.Helper()
	w := &Webhook{probe: "default/" + webhookProbe}
	if hook.Namespace != "" {
		w.probe = hook.Namespace + "/" + webhookProbe
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/review", func(rw http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(rw, "bad review", http.StatusBadRequest)
			return
		}
		req := review.Request
		if req.SubResource != "" {
			w.subresourceCalls.add(req.Namespace + "/" + req.Name)
		} else {
			w.calls.add(req.Namespace + "/" + req.Name)
		}
		resp := &admissionv1.AdmissionResponse{Allowed: true}
		if req.Name != webhookProbe {
			resp = hook.Review(r.Context(), req)
		}
		resp.UID = req.UID
		review.Response, review.Request = resp, nil
		_ = json.NewEncoder(rw).Encode(&review)
	})
	base, certPEM := serveTLS(t, mux)

	url := base + "/review"
	failurePolicy := hook.FailurePolicy
	if failurePolicy == "" {
		failurePolicy = admissionregistrationv1.Fail
	}
	var timeout *int32
	if hook.TimeoutSeconds > 0 {
		timeout = &hook.TimeoutSeconds
	}
	none := admissionregistrationv1.SideEffectClassNone
	clientConfig := admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: certPEM}
	var namespaces *metav1.LabelSelector
	probeNamespace := "default"
	if hook.Namespace != "" {
		namespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": hook.Namespace}}
		probeNamespace = hook.Namespace
	}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{hook.Resource.Group}, APIVersions: []string{"*"}, Resources: []string{hook.Resource.Plural}},
	}}
	name := "test-" + strings.TrimSuffix(hook.Resource.CRDName(), ".")
	if hook.Namespace != "" {
		name += "-" + hook.Namespace
	}
	var cfg client.Object
	if hook.Mutating {
		never := admissionregistrationv1.NeverReinvocationPolicy
		cfg = &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name: "mutate.example.com", ClientConfig: clientConfig, Rules: rules, FailurePolicy: &failurePolicy, NamespaceSelector: namespaces,
				SideEffects: &none, TimeoutSeconds: timeout, AdmissionReviewVersions: []string{"v1"}, ReinvocationPolicy: &never,
			}},
		}
	} else {
		cfg = &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name: "validate.example.com", ClientConfig: clientConfig, Rules: rules, FailurePolicy: &failurePolicy, NamespaceSelector: namespaces,
				SideEffects: &none, TimeoutSeconds: timeout, AdmissionReviewVersions: []string{"v1"},
			}},
		}
	}
	if err := e.Client.Create(Context(t, time.Minute), cfg); err != nil {
		t.Fatalf("register webhook: %v", err)
	}
	w.unregister = func(ctx context.Context) error { return client.IgnoreNotFound(e.Client.Delete(ctx, cfg)) }
	t.Cleanup(func() {
		// The API server would otherwise go on calling a webhook that is
		// no longer served, for the rest of a shared control plane's life.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = e.Client.Delete(ctx, cfg)
	})

	// The API server picks the configuration up asynchronously: update a
	// probe object until the webhook sees it, then remove the probe.
	ctx := Context(t, time.Minute)
	probe := e.Dynamic.Resource(hook.Resource.GVR("v1")).Namespace(probeNamespace)
	probeObject := hook.Resource.Object("v1", webhookProbe, 0)
	if hook.Probe != nil {
		probeObject = hook.Probe.DeepCopy()
		probeObject.SetName(webhookProbe)
	}
	if _, err := probe.Create(ctx, probeObject, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create webhook probe: %v", err)
	}
	for i := 0; w.Calls(probeNamespace+"/"+webhookProbe) == 0; i++ {
		if i == 300 {
			t.Fatal("the API server never called the webhook")
		}
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{"probe":"%d"}}}`, i)
		if _, err := probe.Patch(ctx, webhookProbe, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("update webhook probe: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := probe.Delete(ctx, webhookProbe, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete webhook probe: %v", err)
	}
	return w
}

// Unregister removes the webhook's configuration: the API server stops
// calling it a moment later, as it picks the change up.
func (w *Webhook) Unregister(t testing.TB) {
	t.Helper()
	if err := w.unregister(Context(t, time.Minute)); err != nil {
		t.Fatalf("unregister webhook: %v", err)
	}
}

// TotalCalls is how often the webhook was asked about anything but its
// probe.
func (w *Webhook) TotalCalls() int { return w.calls.totalBut(w.probe) }

// serveTLS serves handler on a loopback port over TLS with a certificate
// made for it, until the test ends, and returns its https base URL and the
// certificate to trust (a webhook's caBundle).
func serveTLS(t testing.TB, handler http.Handler) (baseURL string, caBundle []byte) {
	t.Helper()
	baseURL, caBundle, _ = startTLS(t, handler)
	return baseURL, caBundle
}

// startTLS is serveTLS, and returns the server too, which the test may
// close before it ends.
func startTLS(t testing.TB, handler http.Handler) (baseURL string, caBundle []byte, srv *http.Server) {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String(), certPEM, srv
}
