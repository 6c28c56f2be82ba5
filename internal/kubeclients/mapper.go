package kubeclients

import (
	"net/http"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// NewRESTMapper is the manager's RESTMapper (its MapperProvider):
// controller-runtime's dynamic mapper, which learns a group the first
// time a type of it is mapped, made to learn that group alone. Given
// aggregated discovery, the library's mapper takes in every group the
// server serves with its first lookup and keeps them all: 8.7 MB of svm's
// live heap at 1,000 CRDs, for the half dozen groups the manager maps.
// Asked for the legacy list of groups, it reads the resources of the
// groups it maps, one group version at a time.
func NewRESTMapper(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	legacy := *httpClient
	next := legacy.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	legacy.Transport = legacyGroupList{next: next}
	return apiutil.NewDynamicRESTMapper(cfg, &legacy)
}

// legacyGroupList asks for the lists of groups (/api and /apis) as plain
// JSON, without the aggregated discovery document that would carry every
// group's resources.
type legacyGroupList struct{ next http.RoundTripper }

func (l legacyGroupList) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path == "/api" || req.URL.Path == "/apis" {
		req = req.Clone(req.Context())
		req.Header.Set("Accept", "application/json")
	}
	return l.next.RoundTrip(req)
}
