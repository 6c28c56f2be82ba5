package framework

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	certutil "k8s.io/client-go/util/cert"
)

// Webhook is a real validating admission webhook served by the test on
// loopback, which denies updates to chosen objects and counts its calls.
type Webhook struct {
	mu    sync.Mutex
	calls map[string]int
}

// Calls is how often the webhook was asked about namespace/name.
func (w *Webhook) Calls(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[key]
}

// StartDenyingWebhook registers a webhook that denies every UPDATE of the
// objects of gvr named in deny (as namespace/name) and allows the rest.
func StartDenyingWebhook(t testing.TB, e *Env, gvr schema.GroupVersionResource, deny map[string]bool) *Webhook {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	hook := &Webhook{calls: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/validate", func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		key := review.Request.Namespace + "/" + review.Request.Name
		hook.mu.Lock()
		hook.calls[key]++
		hook.mu.Unlock()
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: !deny[key]}
		if deny[key] {
			resp.Result = &metav1.Status{Code: http.StatusForbidden, Message: "test policy denies " + key}
		}
		review.Response = resp
		review.Request = nil
		_ = json.NewEncoder(w).Encode(&review)
	})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	url := "https://" + ln.Addr().String() + "/validate"
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-some-" + gvr.Resource},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "deny.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: certPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update}, Rule: admissionregistrationv1.Rule{APIGroups: []string{gvr.Group}, APIVersions: []string{"*"}, Resources: []string{gvr.Resource}}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if err := e.Client.Create(Context(t, time.Minute), cfg); err != nil {
		t.Fatalf("register webhook: %v", err)
	}
	// The API server picks the configuration up asynchronously: update a
	// probe object until the webhook sees it, then remove the probe.
	ctx := Context(t, time.Minute)
	probe := e.Dynamic.Resource(gvr).Namespace("default")
	obj := Widget(gvr.Version, "webhook-probe", 0)
	if _, err := probe.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create webhook probe: %v", err)
	}
	for i := 0; hook.Calls("default/webhook-probe") == 0; i++ {
		if i == 300 {
			t.Fatal("the API server never called the webhook")
		}
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{"probe":"%d"}}}`, i)
		if _, err := probe.Patch(ctx, "webhook-probe", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("update webhook probe: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := probe.Delete(ctx, "webhook-probe", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete webhook probe: %v", err)
	}
	return hook
}
