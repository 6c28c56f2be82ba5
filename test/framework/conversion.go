package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Direction is one kind of conversion: from an API version to another, as
// "example.com/v1" → "example.com/v2". A review whose objects came in more
// than one version has From "mixed".
type Direction struct {
	From, To string
}

func (d Direction) String() string { return d.From + "→" + d.To }

// Conversions are what a ConversionWebhook was asked, by direction.
type Conversions struct {
	// Reviews counts ConversionReview requests: webhook calls.
	Reviews map[Direction]int
	// Objects counts the objects converted.
	Objects map[Direction]int
}

// TotalReviews is the number of webhook calls in every direction.
func (c Conversions) TotalReviews() int { return countAll(c.Reviews) }

// TotalObjects is the number of objects converted in every direction.
func (c Conversions) TotalObjects() int { return countAll(c.Objects) }

// Sub is what was asked since before was taken.
func (c Conversions) Sub(before Conversions) Conversions {
	return Conversions{Reviews: subtract(c.Reviews, before.Reviews), Objects: subtract(c.Objects, before.Objects)}
}

func (c Conversions) String() string {
	return fmt.Sprintf("%d reviews %v, %d objects %v", c.TotalReviews(), c.Reviews, c.TotalObjects(), c.Objects)
}

func countAll(m map[Direction]int) int {
	total := 0
	for _, n := range m {
		total += n
	}
	return total
}

// subtract is a less b, without the directions that come to zero.
func subtract(a, b map[Direction]int) map[Direction]int {
	out := make(map[Direction]int, len(a))
	maps.Copy(out, a)
	for d, n := range b {
		out[d] -= n
	}
	maps.DeleteFunc(out, func(_ Direction, n int) bool { return n == 0 })
	return out
}

// ConversionWebhook is a real CRD conversion webhook served by the test on
// loopback: it converts between versions whose schemas are the same (as
// every test resource's v1 and v2 are) by changing apiVersion alone, or
// between versions whose fields differ by moving them too
// (StartRenamingConversionWebhook), and counts what the API server asks
// of it.
type ConversionWebhook struct {
	mu      sync.Mutex
	reviews map[Direction]int
	objects map[Direction]int
	// reshape, if set, converts the rest of an object from one apiVersion
	// to another, for versions whose fields differ (see
	// StartRenamingConversionWebhook).
	reshape func(obj map[string]any, from, to string)
	// srv serves the webhook (see Stop).
	srv *http.Server
}

// Stop closes the webhook's server, as a webhook that is down: the API
// server's calls are refused, and every conversion of the resource fails
// until the test ends.
func (w *ConversionWebhook) Stop(t testing.TB) {
	t.Helper()
	if err := w.srv.Close(); err != nil {
		t.Fatalf("stop the conversion webhook: %v", err)
	}
}

// Conversions is what the webhook was asked so far.
func (w *ConversionWebhook) Conversions() Conversions {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Conversions{Reviews: maps.Clone(w.reviews), Objects: maps.Clone(w.objects)}
}

// convert answers one ConversionReview and counts it.
func (w *ConversionWebhook) convert(req *apiextensionsv1.ConversionRequest) (*apiextensionsv1.ConversionResponse, error) {
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	objects := map[Direction]int{}
	from := ""
	for _, raw := range req.Objects {
		var obj map[string]any
		if err := json.Unmarshal(raw.Raw, &obj); err != nil {
			return nil, err
		}
		apiVersion, _ := obj["apiVersion"].(string)
		objects[Direction{From: apiVersion, To: req.DesiredAPIVersion}]++
		switch from {
		case "":
			from = apiVersion
		case apiVersion:
		default:
			from = "mixed"
		}
		obj["apiVersion"] = req.DesiredAPIVersion
		if w.reshape != nil {
			w.reshape(obj, apiVersion, req.DesiredAPIVersion)
		}
		out, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reviews[Direction{From: from, To: req.DesiredAPIVersion}]++
	for d, n := range objects {
		w.objects[d] += n
	}
	return resp, nil
}

// conversionProbe names the object StartConversionWebhook reads until the
// API server converts it through the webhook.
const conversionProbe = "conversion-probe"

// StartConversionWebhook serves a conversion webhook on loopback, makes it
// the converter of r's CRD (which must exist, served in v1 and v2), and
// waits until the API server calls it. The counts start at zero once it
// does. The CRD goes back to converting without a webhook when the test
// ends.
func (e *Env) StartConversionWebhook(t testing.TB, r Resource) *ConversionWebhook {
	t.Helper()
	return e.startConversionWebhook(t, r, nil)
}

func (e *Env) startConversionWebhook(t testing.TB, r Resource, reshape func(obj map[string]any, from, to string)) *ConversionWebhook {
	t.Helper()
	w := &ConversionWebhook{reviews: map[Direction]int{}, objects: map[Direction]int{}, reshape: reshape}
	mux := http.NewServeMux()
	mux.HandleFunc("/convert", func(rw http.ResponseWriter, req *http.Request) {
		var review apiextensionsv1.ConversionReview
		if err := json.NewDecoder(req.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(rw, "bad review", http.StatusBadRequest)
			return
		}
		resp, err := w.convert(review.Request)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		review.Response, review.Request = resp, nil
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(&review)
	})
	base, certPEM, srv := startTLS(t, mux)
	w.srv = srv

	url := base + "/convert"
	e.setConversion(t, r.CRDName(), &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{
			ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: certPEM},
			ConversionReviewVersions: []string{"v1"},
		},
	})
	t.Cleanup(func() {
		// Runs before the server closes: the API server would otherwise
		// fail every conversion of r for the rest of the control plane's
		// life.
		e.setConversion(t, r.CRDName(), &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter})
	})

	// The API server builds a CRD's converter when it next serves it after
	// the change: create a probe in v1 and read it in v2 until the webhook
	// converts it, then remove the probe and forget what was counted.
	ctx := Context(t, time.Minute)
	probe := e.Dynamic.Resource(r.GVR("v1")).Namespace("default")
	if _, err := probe.Create(ctx, r.Object("v1", conversionProbe, 0), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create conversion probe: %v", err)
	}
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := e.Dynamic.Resource(r.GVR("v2")).Namespace("default").Get(ctx, conversionProbe, metav1.GetOptions{})
		return err == nil && w.Conversions().TotalReviews() > 0, nil
	})
	if err != nil {
		t.Fatalf("the API server never called the conversion webhook: %v", err)
	}
	if err := probe.Delete(ctx, conversionProbe, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete conversion probe: %v", err)
	}
	// The probe built the API server's caches of the resource anew (the
	// CRD changed), and they convert every object stored in a version
	// other than theirs, after the probe's answer: let them finish.
	w.Quiet(t)
	w.mu.Lock()
	clear(w.reviews)
	clear(w.objects)
	w.mu.Unlock()
	return w
}

// Quiet waits until the webhook has had no call for a second, at most a
// minute, and returns its counts. The API server converts some objects
// after it answers the request that made it (its watch caches decode what
// was written), so counts are read once it is quiet.
func (w *ConversionWebhook) Quiet(t testing.TB) Conversions {
	t.Helper()
	last := w.Conversions()
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, time.Minute, false, func(context.Context) (bool, error) {
		now := w.Conversions()
		done := now.TotalReviews() == last.TotalReviews()
		last = now
		return done, nil
	})
	if err != nil {
		t.Fatalf("the conversion webhook never went quiet: %s", last)
	}
	return last
}

// setConversion sets the named CRD's conversion.
func (e *Env) setConversion(t testing.TB, name string, conversion *apiextensionsv1.CustomResourceConversion) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return err
		}
		crd.Spec.Conversion = conversion
		return e.Client.Update(ctx, crd)
	})
	if err != nil {
		t.Fatalf("set conversion of CRD %s: %v", name, err)
	}
}
