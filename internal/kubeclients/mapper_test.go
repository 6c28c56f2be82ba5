package kubeclients

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// groupsServer serves the discovery of groups a.example.com and
// b.example.com, each with one resource in v1, legacy or aggregated as
// asked, and records the paths asked for and whether any request asked
// for aggregated discovery.
type groupsServer struct {
	mu         sync.Mutex
	paths      []string
	aggregated bool
}

func (s *groupsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.paths = append(s.paths, r.URL.Path)
	aggregated := strings.Contains(r.Header.Get("Accept"), "apidiscovery")
	s.aggregated = s.aggregated || aggregated
	s.mu.Unlock()
	var body any
	switch {
	case aggregated && (r.URL.Path == "/api" || r.URL.Path == "/apis"):
		serveAggregated(w, r.URL.Path)
		return
	case r.URL.Path == "/api":
		body = metav1.APIVersions{Versions: []string{"v1"}}
	case r.URL.Path == "/apis":
		list := metav1.APIGroupList{}
		for _, g := range []string{"a.example.com", "b.example.com"} {
			v := metav1.GroupVersionForDiscovery{GroupVersion: g + "/v1", Version: "v1"}
			list.Groups = append(list.Groups, metav1.APIGroup{Name: g, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v})
		}
		body = list
	case r.URL.Path == "/apis/a.example.com/v1" || r.URL.Path == "/apis/b.example.com/v1":
		body = metav1.APIResourceList{GroupVersion: strings.TrimPrefix(r.URL.Path, "/apis/"), APIResources: []metav1.APIResource{
			{Name: "widgets", Kind: "Widget", Verbs: metav1.Verbs{"list"}},
		}}
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// serveAggregated answers path (/api or /apis) with the aggregated
// discovery document: every group with its resources.
func serveAggregated(w http.ResponseWriter, path string) {
	list := apidiscoveryv2.APIGroupDiscoveryList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"}}
	if path == "/apis" {
		for _, g := range []string{"a.example.com", "b.example.com"} {
			list.Items = append(list.Items, apidiscoveryv2.APIGroupDiscovery{
				ObjectMeta: metav1.ObjectMeta{Name: g},
				Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
					Resources: []apidiscoveryv2.APIResourceDiscovery{{
						Resource: "widgets", ResponseKind: &metav1.GroupVersionKind{Group: g, Version: "v1", Kind: "Widget"},
						Scope: apidiscoveryv2.ScopeCluster, Verbs: []string{"list"},
					}},
				}},
			})
		}
	}
	w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	_ = json.NewEncoder(w).Encode(list)
}

// TestRESTMapperLearnsTheGroupsItMaps: mapping a kind of a.example.com
// reads the list of groups without asking for aggregated discovery, and
// that group's resources alone, never b.example.com's.
func TestRESTMapperLearnsTheGroupsItMaps(t *testing.T) {
	srv := &groupsServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	cfg := &rest.Config{Host: ts.URL}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewRESTMapper(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	mapping, err := m.RESTMapping(schema.GroupKind{Group: "a.example.com", Kind: "Widget"}, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if mapping.Resource.Resource != "widgets" {
		t.Errorf("mapped to %v, want widgets", mapping.Resource)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.aggregated {
		t.Error("a request asked for aggregated discovery")
	}
	if !slices.Contains(srv.paths, "/apis/a.example.com/v1") || slices.Contains(srv.paths, "/apis/b.example.com/v1") {
		t.Errorf("paths read %v, want a.example.com/v1's resources and not b.example.com/v1's", srv.paths)
	}
}
