package apiservers

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestParseUsage(t *testing.T) {
	const metrics = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="example.com",resource="widgets",scope="namespace",subresource="",verb="GET",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="example.com",resource="widgets",scope="namespace",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_total{code="404",component="apiserver",dry_run="",group="example.com",resource="widgets",scope="resource",subresource="",verb="LIST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="example.com",resource="widgets",scope="namespace",subresource="",verb="GET",version="v2"} 40
apiserver_request_total{code="200",component="apiserver",dry_run="",group="example.com",resource="gadgets",scope="namespace",subresource="",verb="GET",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="widgets",scope="namespace",subresource="",verb="GET",version="v1"} 9
# HELP apiserver_longrunning_requests [STABLE] Gauge of all active long-running apiserver requests
# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="example.com",resource="widgets",scope="cluster",subresource="",verb="WATCH",version="v1"} 2
apiserver_longrunning_requests{component="apiserver",group="example.com",resource="widgets",scope="cluster",subresource="",verb="WATCH",version="v2"} 5
# HELP process_start_time_seconds [ALPHA] Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.7640e+09
`
	got, err := ParseUsage(strings.NewReader(metrics), schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"})
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{Requests: 6, Open: 2, Since: time.Unix(1764000000, 0).UTC()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseUsage (-want +got):\n%s", diff)
	}

	none, err := ParseUsage(strings.NewReader(metrics), schema.GroupVersionResource{Group: "example.com", Version: "v3", Resource: "widgets"})
	if err != nil {
		t.Fatal(err)
	}
	if none.Requests != 0 || none.Open != 0 {
		t.Errorf("a version nobody asked for: %+v", none)
	}
}
