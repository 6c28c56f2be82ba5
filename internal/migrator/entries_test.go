package migrator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
)

func TestClearsOnFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    *version.Info
		want bool
	}{
		{"1.34", &version.Info{Major: "1", Minor: "34", GitVersion: "v1.34.4"}, true},
		{"1.35", &version.Info{Major: "1", Minor: "35", GitVersion: "v1.35.4"}, true},
		{"1.36", &version.Info{Major: "1", Minor: "36", GitVersion: "v1.36.3"}, true},
		{"1.37: kubernetes#136949", &version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2"}, false},
		{"1.38", &version.Info{Major: "1", Minor: "38"}, false},
		{"a provider's suffix", &version.Info{Major: "1", Minor: "35+", GitVersion: "v1.35.4-gke.100"}, true},
		{"a provider's suffix, fixed", &version.Info{Major: "1", Minor: "37+"}, false},
		{"unreadable: assume it clears", &version.Info{GitVersion: "v0.0.0-master"}, true},
		{"unknown: assume it clears", nil, true},
	} {
		if got := clearsOnFailure(tc.v); got != tc.want {
			t.Errorf("%s: clearsOnFailure = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHeldNamesOther(t *testing.T) {
	for _, tc := range []struct {
		h    held
		want bool
	}{
		{nil, false},
		{held{"example.com/v2"}, false},
		{held{"example.com/v2", "example.com/v1"}, true},
		{held{"example.com/v1"}, true},
	} {
		if got := tc.h.namesOther("example.com/v2"); got != tc.want {
			t.Errorf("%v.namesOther(example.com/v2) = %v, want %v", tc.h, got, tc.want)
		}
	}
}

func TestLost(t *testing.T) {
	served := func(v string) bool { return v == "example.com/v1" || v == "example.com/v2" }
	for _, tc := range []struct {
		name   string
		h      held
		served func(string) bool
		want   bool
	}{
		{"an entry naming the version written through", held{"example.com/v2"}, served, true},
		{"an entry naming another served version", held{"example.com/v1"}, served, true},
		{"entries naming only versions the server no longer has: dropped by design", held{"example.com/v0", "extensions/v1beta1"}, served, false},
		{"one of them still served", held{"example.com/v0", "example.com/v1"}, served, true},
		{"what is served unknown: every version counts", held{"example.com/v0"}, nil, true},
		{"no entries", nil, served, false},
		{"entries naming another group's version: dropped by design", held{"events.example.com/v1"}, func(string) bool { return true }, false},
		{"another group's, what is served unknown", held{"events.example.com/v1"}, nil, false},
		{"another group's and one of this group's", held{"events.example.com/v1", "example.com/v1"}, served, true},
	} {
		if got := lost(tc.h, "example.com/v2", tc.served); got != tc.want {
			t.Errorf("%s: lost = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLostWithDefinedVersions holds lost to what the field manager of a
// custom resource converts to: every version its CRD defines, served or
// not, besides those discovery lists (servedSet).
func TestLostWithDefinedVersions(t *testing.T) {
	groups := &metav1.APIGroupList{Groups: []metav1.APIGroup{{
		Name:     "example.com",
		Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "example.com/v2", Version: "v2"}},
	}}}
	// v1 is defined in the CRD with served: false: discovery does not list it.
	defined := []string{"example.com/v1", "example.com/v2"}
	for _, tc := range []struct {
		name    string
		h       held
		defined []string
		want    bool
	}{
		{"an entry naming a version defined but not served: converted, so lost", held{"example.com/v1"}, defined, true},
		{"an entry naming a version neither served nor defined: dropped by design", held{"example.com/v0"}, defined, false},
		{"both: the defined one is lost", held{"example.com/v0", "example.com/v1"}, defined, true},
		{"no CRD (an aggregated API server's resource): discovery alone", held{"example.com/v1"}, nil, false},
		{"another group's version, though defined: dropped by design", held{"other.example.com/v1"}, append(defined, "other.example.com/v1"), false},
	} {
		set := servedSet(groups, tc.defined)
		if got := lost(tc.h, "example.com/v2", func(v string) bool { return set[v] }); got != tc.want {
			t.Errorf("%s: lost(%v) = %v, want %v", tc.name, tc.h, got, tc.want)
		}
	}
}

func TestMoveAnswered(t *testing.T) {
	e := func(manager, apiVersion string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: apiVersion}
	}
	sent := []metav1.ManagedFieldsEntry{e("alice", "example.com/v2"), e("bob", "example.com/v2")}
	for _, tc := range []struct {
		name     string
		answered []metav1.ManagedFieldsEntry
		want     moveOutcome
	}{
		{"as sent", sent, movedAsSent},
		{"as sent, in another order", []metav1.ManagedFieldsEntry{sent[1], sent[0]}, movedAsSent},
		{"none: cleared", nil, movedLost},
		{"the stored ones kept", []metav1.ManagedFieldsEntry{e("alice", "example.com/v1"), e("bob", "example.com/v2")}, movedNot},
		{"one more", append([]metav1.ManagedFieldsEntry{e("carol", "example.com/v1")}, sent...), movedNot},
	} {
		if got := moveAnswered(sent, tc.answered); got != tc.want {
			t.Errorf("%s: moveAnswered = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := moveAnswered(nil, nil); got != movedAsSent {
		t.Errorf("nothing sent, nothing answered: %v, want movedAsSent", got)
	}
}

// entriesServer serves widgets.example.com in v2, n objects whose entries
// name the versions in entries, as an API server of minor, whose writes
// (and dry runs) answer with the object's managedFields or without them.
type entriesServer struct {
	n       int
	minor   string
	entries []string
	// writeKeeps and dryRunKeeps: whether the answer carries the entries;
	// dryRunFails answers dry runs with 500.
	writeKeeps, dryRunKeeps, dryRunFails bool
	// discovered are the versions of example.com discovery lists (v1 and
	// v2 when nil); crd, those the CRD widgets.example.com defines (the
	// CRD API answers 404 when nil); crdStatus, when set, is the status
	// every list of CRDs is answered with.
	discovered, crd []string
	crdStatus       int

	mu                        sync.Mutex
	writes, dryRuns, crdLists int
}

func (s *entriesServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const object = "/apis/example.com/v2/namespaces/ns/widgets/"
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/version":
		writeJSON(w, http.StatusOK, version.Info{Major: "1", Minor: s.minor, GitVersion: "v1." + s.minor + ".4"})
	case r.Method == http.MethodGet && r.URL.Path == "/api":
		writeJSON(w, http.StatusOK, metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
	case r.Method == http.MethodGet && r.URL.Path == "/apis":
		group, discovered := metav1.APIGroup{Name: "example.com"}, s.discovered
		if discovered == nil {
			discovered = []string{"v1", "v2"}
		}
		for _, v := range discovered {
			group.Versions = append(group.Versions, metav1.GroupVersionForDiscovery{GroupVersion: "example.com/" + v, Version: v})
		}
		writeJSON(w, http.StatusOK, metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{group}})
	case r.Method == http.MethodGet && r.URL.Path == crdsPath && (s.crd != nil || s.crdStatus != 0):
		s.crdLists++
		s.listCRDs(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/apis/example.com/v2":
		writeJSON(w, http.StatusOK, metav1.APIResourceList{GroupVersion: "example.com/v2", APIResources: []metav1.APIResource{
			{Name: "widgets", Namespaced: true, Kind: "Widget", Verbs: metav1.Verbs{"list", "patch"}},
		}})
	case r.Method == http.MethodGet && r.URL.Path == "/apis/example.com/v2/widgets":
		list := metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
		for i := range s.n {
			list.Items = append(list.Items, s.object(fmt.Sprintf("w-%03d", i), "1", true))
		}
		writeJSON(w, http.StatusOK, list)
	case r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, object):
		name := strings.TrimPrefix(r.URL.Path, object)
		if r.URL.Query().Get("dryRun") == "All" {
			s.dryRuns++
			if s.dryRunFails {
				http.Error(w, "conversion webhook for example.com/v2, Kind=Widget failed", http.StatusInternalServerError)
				return
			}
			writeJSON(w, http.StatusOK, s.object(name, "1", s.dryRunKeeps))
			return
		}
		s.writes++
		writeJSON(w, http.StatusOK, s.object(name, "2", s.writeKeeps))
	default:
		http.NotFound(w, r)
	}
}

// listCRDs answers a list of CRDs: the CRD widgets.example.com when the
// list asks for it by name, as JSON, and svm may list CRDs.
func (s *entriesServer) listCRDs(w http.ResponseWriter, r *http.Request) {
	if s.crdStatus != 0 {
		writeJSON(w, s.crdStatus, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: int32(s.crdStatus)})
		return
	}
	var crd apiextensionsv1.CustomResourceDefinition
	crd.Name = "widgets.example.com"
	for _, v := range s.crd {
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v, Served: v == "v2", Storage: v == "v2"})
	}
	list := apiextensionsv1.CustomResourceDefinitionList{TypeMeta: metav1.TypeMeta{Kind: "CustomResourceDefinitionList", APIVersion: "apiextensions.k8s.io/v1"}}
	if r.URL.Query().Get("fieldSelector") == "metadata.name=widgets.example.com" && r.Header.Get("Accept") == "application/json" {
		list.Items = append(list.Items, crd)
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *entriesServer) object(name, rv string, entries bool) metav1.PartialObjectMetadata {
	o := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: "uid", ResourceVersion: rv}}
	if entries {
		for i, v := range s.entries {
			o.ManagedFields = append(o.ManagedFields, metav1.ManagedFieldsEntry{Manager: fmt.Sprint("m", i), Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: v})
		}
	}
	return o
}

// TestNoWriteLosesManagedFields runs the engine against fake API servers
// that answer svm's writes, or their dry runs, without the objects'
// managedFields, as kube-apiserver before 1.37 does when its field manager
// fails.
func TestNoWriteLosesManagedFields(t *testing.T) {
	const n = 6
	both := []string{"example.com/v1", "example.com/v2"}
	tests := []struct {
		name string
		srv  *entriesServer
		// wantReason: "" when the run ends well.
		wantReason                 string
		wantWrites, wantDryRuns    int
		wantRestored, wantFailed   int64
		wantFailedName, wantInText string
	}{
		{
			name: "1.35, the field manager fails: stopped before any write",
			srv:  &entriesServer{n: n, minor: "35", entries: both, writeKeeps: false, dryRunKeeps: false},
			// The probe is the one request that says so.
			wantReason: ReasonManagedFieldsAtRisk, wantDryRuns: 1,
			wantInText: "this API server is v1.35.4",
		},
		{
			name:       "1.35, the field manager works: one dry run, every object written",
			srv:        &entriesServer{n: n, minor: "35", entries: both, writeKeeps: true, dryRunKeeps: true},
			wantWrites: n, wantDryRuns: 1, wantRestored: n,
		},
		{
			name:       "1.35, the dry run fails: it tells nothing, every such object asks",
			srv:        &entriesServer{n: n, minor: "35", entries: both, writeKeeps: true, dryRunFails: true},
			wantWrites: n, wantDryRuns: n, wantRestored: n,
		},
		{
			name:       "1.35, entries naming only the version written through: nothing to convert, no dry run",
			srv:        &entriesServer{n: n, minor: "35", entries: []string{"example.com/v2"}, writeKeeps: true},
			wantWrites: n, wantRestored: n,
		},
		{
			name: "1.37 keeps entries: no dry run, yet an answer without them stops the run",
			srv:  &entriesServer{n: n, minor: "37", entries: both, writeKeeps: false},
			// One worker: the first write is the one that lost them.
			wantReason: ReasonManagedFieldsLost, wantWrites: 1, wantFailed: 1, wantFailedName: "w-000",
			wantInText: "this API server reports v1.37.4",
		},
		{
			name:       "entries naming only versions the server no longer has: dropped by design, not lost",
			srv:        &entriesServer{n: n, minor: "37", entries: []string{"example.com/v0"}, writeKeeps: false},
			wantWrites: n, wantRestored: n,
		},
		{
			name: "1.35, entries naming a version the CRD defines but does not serve: converted, so stopped before any write",
			srv: &entriesServer{n: n, minor: "35", entries: []string{"example.com/v1"}, discovered: []string{"v2"}, crd: []string{"v1", "v2"},
				writeKeeps: false, dryRunKeeps: false},
			wantReason: ReasonManagedFieldsAtRisk, wantDryRuns: 1,
			wantInText: "example.com/v1",
		},
		{
			name: "1.37, entries naming a version the CRD defines but does not serve: an answer without them stops the run",
			srv: &entriesServer{n: n, minor: "37", entries: []string{"example.com/v1"}, discovered: []string{"v2"}, crd: []string{"v1", "v2"},
				writeKeeps: false},
			wantReason: ReasonManagedFieldsLost, wantWrites: 1, wantFailed: 1, wantFailedName: "w-000",
			wantInText: "example.com/v1",
		},
		{
			name: "entries naming a version neither served nor defined by the CRD: dropped by design, not lost",
			srv: &entriesServer{n: n, minor: "37", entries: []string{"example.com/v0"}, discovered: []string{"v2"}, crd: []string{"v1", "v2"},
				writeKeeps: false},
			wantWrites: n, wantRestored: n,
		},
		{
			name: "the CRD cannot be read: every version of the group counts",
			srv: &entriesServer{n: n, minor: "37", entries: []string{"example.com/v0"}, discovered: []string{"v2"}, crdStatus: http.StatusForbidden,
				writeKeeps: false},
			wantReason: ReasonManagedFieldsLost, wantWrites: 1, wantFailed: 1, wantFailedName: "w-000",
			wantInText: "example.com/v0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(tt.srv)
			defer ts.Close()
			m, err := New(&rest.Config{Host: ts.URL, QPS: -1}, Options{
				Workers: 1, DisablePacing: true, DisableChangeWatch: true,
				Retry: Backoff{Initial: time.Millisecond, Max: time.Millisecond, Attempts: 2},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := m.Run(ctx, Request{Resource: schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "widgets"}})
			var terminal *TerminalError
			switch {
			case tt.wantReason != "":
				if !errors.As(err, &terminal) || terminal.Reason != tt.wantReason {
					t.Fatalf("Run: %v, want a TerminalError with reason %s", err, tt.wantReason)
				}
				for _, want := range []string{"kubernetes/kubernetes#136919", "w-000", tt.wantInText} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
			case err != nil:
				t.Fatalf("Run: %v", err)
			}
			p := res.Progress
			if p.Restored != tt.wantRestored || p.Failed != tt.wantFailed || p.AlreadyCurrent != 0 {
				t.Errorf("progress %+v: want %d re-stored, %d failed", p.Counts, tt.wantRestored, tt.wantFailed)
			}
			if tt.wantFailedName != "" && (len(res.FailedObjects) != 1 || res.FailedObjects[0].Name != tt.wantFailedName ||
				!strings.Contains(res.FailedObjects[0].Reason, "without its managedFields")) {
				t.Errorf("failed objects %+v, want %s, without its managedFields", res.FailedObjects, tt.wantFailedName)
			}
			tt.srv.mu.Lock()
			defer tt.srv.mu.Unlock()
			if tt.srv.writes != tt.wantWrites || tt.srv.dryRuns != tt.wantDryRuns {
				t.Errorf("%d writes and %d dry runs, want %d and %d", tt.srv.writes, tt.srv.dryRuns, tt.wantWrites, tt.wantDryRuns)
			}
			if tt.srv.crdLists > 1 {
				t.Errorf("the CRD was listed %d times, want at most once per run", tt.srv.crdLists)
			}
		})
	}
}
