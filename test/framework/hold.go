package framework

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// HeldWrite is a write of one object that a validating webhook holds in
// flight (HoldWrite).
type HeldWrite struct {
	done chan error
}

// HoldWrite starts a write of r's object namespace/name through version (a
// merge patch that labels it held=yes) that a validating webhook holds for
// hold, and returns once the API server has asked the webhook about it: the
// write is in flight from then on, under the storage the resource had when
// it began, and lands after hold (again after each conflict: the API
// server retries a patch, and asks the webhook again). Only that write is
// held: later writes of the object carry the label already.
func HoldWrite(t testing.TB, e *Env, r Resource, version, namespace, name string, hold time.Duration) *HeldWrite {
	t.Helper()
	hook := StartAdmissionWebhook(t, e, AdmissionHook{
		Resource: r, TimeoutSeconds: int32(min(30, hold/time.Second+5)),
		Review: func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			if req.Name == name && strings.Contains(string(req.Object.Raw), `"held":"yes"`) && !strings.Contains(string(req.OldObject.Raw), `"held":"yes"`) {
				select {
				case <-time.After(hold):
				case <-ctx.Done():
				}
			}
			return &admissionv1.AdmissionResponse{Allowed: true}
		},
	})
	h := &HeldWrite{done: make(chan error, 1)}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := e.Dynamic.Resource(r.GVR(version)).Namespace(namespace).Patch(ctx, name, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"held":"yes"}}}`), metav1.PatchOptions{FieldManager: "slow-writer"})
		h.done <- err
	}()
	Eventually(t, "the write reaches the webhook", 30*time.Second, func(context.Context) (bool, error) {
		return hook.Calls(namespace+"/"+name) > 0, nil
	})
	return h
}

// Wait waits for the held write to land, and fails the test if it failed.
func (h *HeldWrite) Wait(t testing.TB) {
	t.Helper()
	if err := <-h.done; err != nil {
		t.Fatalf("the held write: %v", err)
	}
}
