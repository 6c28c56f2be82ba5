package upgrade

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/resources"
)

// Hashes read from the discovery documents of a local kube-apiserver
// v1.37.1, next to the version each resource is stored in (which its
// StorageVersion object reported). Several are stored in a version
// discovery does not serve, so only the enumeration of version names finds
// them.
var realHashes = []struct {
	group, kind, hash string
	served            []string
	want              schema.GroupVersion
}{
	{"example.com", "Widget", "gIwvi5rymmg=", []string{"v1", "v2"}, schema.GroupVersion{Group: "example.com", Version: "v1"}},
	{"example.com", "Widget", "zRcoV5EeA3s=", []string{"v1", "v2"}, schema.GroupVersion{Group: "example.com", Version: "v2"}},
	{"", "Event", "r2yiGXH7wu8=", []string{"v1"}, schema.GroupVersion{Version: "v1"}},
	{"", "Pod", "xPOwRZ+Yhw8=", []string{"v1"}, schema.GroupVersion{Version: "v1"}},
	{"apps", "Deployment", "8aSe+NMegvE=", []string{"v1"}, schema.GroupVersion{Group: "apps", Version: "v1"}},
	{"autoscaling", "HorizontalPodAutoscaler", "qwQve8ut294=", []string{"v1", "v2"}, schema.GroupVersion{Group: "autoscaling", Version: "v2"}},
	// Stored in versions that are not served.
	{"apiextensions.k8s.io", "CustomResourceDefinition", "jfWCUB31mvA=", []string{"v1"}, schema.GroupVersion{Group: "apiextensions.k8s.io", Version: "v1beta1"}},
	{"storagemigration.k8s.io", "StorageVersionMigration", "pCjmmKOkLy4=", []string{"v1"}, schema.GroupVersion{Group: "storagemigration.k8s.io", Version: "v1beta1"}},
	{"certificates.k8s.io", "ClusterTrustBundle", "v5yhuVertL4=", []string{"v1"}, schema.GroupVersion{Group: "certificates.k8s.io", Version: "v1beta1"}},
	{"resource.k8s.io", "DeviceTaintRule", "i+85+TcIKpA=", []string{"v1"}, schema.GroupVersion{Group: "resource.k8s.io", Version: "v1beta2"}},
}

func TestHashIndexResolvesRealHashes(t *testing.T) {
	for _, tt := range realHashes {
		t.Run(tt.kind+"/"+tt.want.Version, func(t *testing.T) {
			var served []schema.GroupVersion
			for _, v := range tt.served {
				served = append(served, schema.GroupVersion{Group: tt.group, Version: v})
			}
			got, ok := newHashIndex(tt.kind, tt.group, served).resolve(tt.hash)
			if !ok || got != tt.want {
				t.Errorf("resolve(%s) = %v, %v; want %v", tt.hash, got, ok, tt.want)
			}
		})
	}
}

func TestHashIndexCandidates(t *testing.T) {
	// A version name Kubernetes would not use is found only when svm saw
	// it (in a CRD, say).
	odd := schema.GroupVersion{Group: "example.com", Version: "preview"}
	hash := resources.StorageVersionHash(odd.Group, odd.Version, "Widget")
	if gv, ok := newHashIndex("Widget", "example.com", []schema.GroupVersion{odd}).resolve(hash); !ok || gv != odd {
		t.Errorf("candidate not resolved: %v %v", gv, ok)
	}
	if gv, ok := newHashIndex("Widget", "example.com", nil).resolve(hash); ok {
		t.Errorf("resolved %v without it being a candidate", gv)
	}
	// Another group's version is found only as a candidate too.
	other := schema.GroupVersion{Group: "events.k8s.io", Version: "v1"}
	hash = resources.StorageVersionHash(other.Group, other.Version, "Event")
	if gv, ok := newHashIndex("Event", "", []schema.GroupVersion{other}).resolve(hash); !ok || gv != other {
		t.Errorf("other group's candidate not resolved: %v %v", gv, ok)
	}
}

func TestHashIndexWithoutKind(t *testing.T) {
	if _, ok := newHashIndex("", "example.com", nil).resolve("gIwvi5rymmg="); ok {
		t.Error("resolved a hash without knowing the kind")
	}
}
