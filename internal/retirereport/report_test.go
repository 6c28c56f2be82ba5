package retirereport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/operation"
)

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

func TestReportSaysWhatRetireDid(t *testing.T) {
	res := operation.RetireResult{
		Resource: widgets, Target: "example.com/v2", CRD: "widgets.example.com", MayBeStored: true,
		StoredBecause: "status.storedVersions [v1 v2] lists v1", Objects: 3, NamingVersion: 2,
		Migration: &operation.Result{Resource: widgets, Counts: operation.Counts{
			Listed: 3, Restored: 2, Failed: 1, ManagedFieldsRewritten: 2, ManagedFieldsLeft: operation.LeftCounts{Refused: 1},
		}, FailedObjects: []operation.FailedObject{{Namespace: "ns", Name: "w-3", Reason: "denied by a webhook"}}},
		StoredVersions: []string{"v1", "v2"}, Served: true,
	}
	r := New(res, false, fmt.Errorf("widgets.v1.example.com: %w", operation.ErrManagedFieldsLeft))
	if r.Outcome != "managedFieldsLeft" || r.Resource != "widgets.v1.example.com" || r.Version != Version {
		t.Errorf("report = %+v, want outcome managedFieldsLeft for widgets.v1.example.com", r)
	}
	if w := r.Rewrite; w == nil || w.Listed != 3 || w.Restored != 2 || w.Failed != 1 || w.ManagedFieldsLeft == nil || w.ManagedFieldsLeft.Refused != 1 {
		t.Fatalf("rewrite = %+v, want the migration's counts", r.Rewrite)
	}
	doc, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"managedFieldsDropped":0`, `"managedFieldsLeft":{"refused":1}`, `"failedObjects":[{"namespace":"ns","name":"w-3","reason":"denied by a webhook"}]`} {
		if !bytes.Contains(doc, []byte(field)) {
			t.Errorf("the document lacks %s:\n%s", field, doc)
		}
	}
	var out strings.Builder
	WriteTable(&out, r, time.Second)
	for _, line := range []string{
		"widgets.v1.example.com (customresourcedefinition widgets.example.com), kept: example.com/v2",
		"rewrote: listed 3: migrated 2 (re-stored 2, already current 0), written since the start 0, gone 0, failed 1; managedFields moved off the retired versions on 2 objects, entries left naming a retired version 1 (Refused 1)",
		"  failed ns/w-3: denied by a webhook",
		"not done: managedFields entries still name it",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("the table lacks %q:\n%s", line, out.String())
		}
	}
}

func TestReportOfADryRunSaysWhatItWouldDo(t *testing.T) {
	r := New(operation.RetireResult{Resource: widgets, Target: "example.com/v2", NamingVersion: 4, Objects: 9}, true, nil)
	if r.Outcome != "dryRun" || r.Rewrite != nil {
		t.Errorf("report = %+v, want a dry run that rewrote nothing", r)
	}
	var out strings.Builder
	WriteTable(&out, r, 0)
	if want := "dry run, nothing written: would rewrite the managedFields of 4 objects"; !strings.Contains(out.String(), want) {
		t.Errorf("the table lacks %q:\n%s", want, out.String())
	}
	if r := New(operation.RetireResult{Resource: widgets}, false, errors.New("boom")); r.Outcome != "failed" || r.Error != "boom" {
		t.Errorf("report of an error = %+v, want failed, saying why", r)
	}
}
