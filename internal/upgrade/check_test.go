package upgrade

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/test/golden"
)

const unknownHash = migrationv1alpha1.UnknownStorageVersionHash

var (
	widgetV1 = resources.StorageVersionHash("example.com", "v1", "Widget")
	widgetV2 = resources.StorageVersionHash("example.com", "v2", "Widget")
	deployV1 = resources.StorageVersionHash("apps", "v1", "Deployment")
	// deployV1beta2 is what a server of an older release would store.
	deployV1beta2 = resources.StorageVersionHash("apps", "v1beta2", "Deployment")
	crdHash       = resources.StorageVersionHash("apiextensions.k8s.io", "v1beta1", "CustomResourceDefinition")
	secretV1      = resources.StorageVersionHash("", "v1", "Secret")

	crds    = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}
	gadgets = schema.GroupResource{Group: "example.com", Resource: "gadgets"}
)

func state(gr schema.GroupResource, current string, persisted ...string) migrationv1alpha1.StorageState {
	r := migrationv1alpha1.GroupResource{Group: gr.Group, Resource: gr.Resource}
	return migrationv1alpha1.StorageState{
		ObjectMeta: metav1.ObjectMeta{Name: migrationv1alpha1.StorageStateName(r)},
		Spec:       migrationv1alpha1.StorageStateSpec{Resource: r},
		Status:     migrationv1alpha1.StorageStateStatus{CurrentStorageVersionHash: current, PersistedStorageVersionHashes: persisted},
	}
}

// widgetCRD is the widgets CRD with v1 and v2 (v1 no longer served when
// v1Served is false), storing storage, with storedVersions stored.
func widgetCRD(storage string, v1Served bool, stored ...string) apiextensionsv1.CustomResourceDefinition {
	return apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: v1Served, Storage: storage == "v1"},
				{Name: "v2", Served: true, Storage: storage == "v2"},
			},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: stored},
	}
}

func server(id, encoding string, decodable ...string) apiserverinternalv1alpha1.ServerStorageVersion {
	return apiserverinternalv1alpha1.ServerStorageVersion{APIServerID: id, EncodingVersion: encoding, DecodableVersions: decodable, ServedVersions: decodable[:1]}
}

// storageVersion is the StorageVersion object named name, with the common
// encoding version the API server computes from servers.
func storageVersion(name string, servers ...apiserverinternalv1alpha1.ServerStorageVersion) apiserverinternalv1alpha1.StorageVersion {
	sv := apiserverinternalv1alpha1.StorageVersion{ObjectMeta: metav1.ObjectMeta{Name: name}}
	sv.Status.StorageVersions = servers
	if len(servers) > 0 && !slices.ContainsFunc(servers, func(s apiserverinternalv1alpha1.ServerStorageVersion) bool {
		return s.EncodingVersion != servers[0].EncodingVersion
	}) {
		common := servers[0].EncodingVersion
		sv.Status.CommonEncodingVersion = &common
	}
	return sv
}

// discovery of a v1.37 server, with widgets served in v1 and v2.
func discovery(widgetsHash string) Discovery {
	return Discovery{
		Resources: []DiscoveredResource{
			{GroupResource: widgets, Kind: "Widget", StorageVersionHash: widgetsHash},
			{GroupResource: deployments, Kind: "Deployment", StorageVersionHash: deployV1},
			{GroupResource: crds, Kind: "CustomResourceDefinition", StorageVersionHash: crdHash},
			{GroupResource: schema.GroupResource{Resource: "secrets"}, Kind: "Secret", StorageVersionHash: secretV1},
		},
		GroupVersions: map[string][]string{"example.com": {"v2", "v1"}, "apps": {"v1"}, "apiextensions.k8s.io": {"v1"}, "": {"v1"}},
	}
}

// cluster is the Input of t against a server that serves svm's API and
// what discovery(widgetV2) holds, with objects: StorageStates, CRDs and
// StorageVersions, the last with the StorageVersion API served.
func cluster(t Target, objects ...any) Input {
	in := Input{Target: t, Discovery: discovery(widgetV2), SVMServed: true}
	for _, o := range objects {
		switch o := o.(type) {
		case migrationv1alpha1.StorageState:
			in.StorageStates = append(in.StorageStates, o)
		case apiextensionsv1.CustomResourceDefinition:
			in.CRDs = append(in.CRDs, o)
		case apiserverinternalv1alpha1.StorageVersion:
			in.StorageVersions = append(in.StorageVersions, o)
			in.StorageVersionAPIServed = true
		default:
			panic(fmt.Sprintf("cluster: %T is not an object of an Input", o))
		}
	}
	return in
}

func target(flags ...string) Target {
	t := Target{}
	for _, f := range flags {
		if err := t.ParseDecodable(f); err != nil {
			panic(err)
		}
	}
	return t
}

func TestCheck(t *testing.T) {
	disagreeing := storageVersion("apps.deployments",
		server("apiserver-a", "apps/v1", "apps/v1", "apps/v1beta2"),
		server("apiserver-b", "apps/v1beta2", "apps/v1beta2", "apps/v1"))
	tests := []struct {
		name string
		in   Input
		// want is the verdict, stored versions with their sources, the
		// versions the target cannot decode, and words every reason must
		// hold, in order.
		want         Verdict
		wantStored   map[string][]Source
		wantNot      []string
		wantReasons  []string
		wantAny      bool
		wantDisagree bool
	}{{
		name:        "migrated to v2, target decodes v2",
		in:          cluster(target("widgets.example.com=v2"), state(widgets, widgetV2, widgetV2), widgetCRD("v2", true, "v2")),
		want:        VerdictSafe,
		wantStored:  map[string][]Source{"example.com/v2": {SourceCRDStoredVersions, SourceDiscovery, SourceStorageState}},
		wantReasons: []string{"only v2 may be stored, and the target decodes it"},
	}, {
		name:        "migrated to v2, target decodes v1 only",
		in:          cluster(target("widgets.example.com=v1"), state(widgets, widgetV2, widgetV2), widgetCRD("v2", true, "v2")),
		want:        VerdictUnsafe,
		wantStored:  map[string][]Source{"example.com/v2": {SourceCRDStoredVersions, SourceDiscovery, SourceStorageState}},
		wantNot:     []string{"example.com/v2"},
		wantReasons: []string{"the target cannot decode v2 (CRD storedVersions, discovery, StorageState)"},
	}, {
		name: "flipped to v2, migration not done",
		in:   cluster(target("widgets.example.com=v2"), state(widgets, widgetV2, widgetV1, widgetV2), widgetCRD("v2", true, "v1", "v2")),
		want: VerdictUnsafe,
		wantStored: map[string][]Source{
			"example.com/v1": {SourceCRDStoredVersions, SourceStorageState},
			"example.com/v2": {SourceCRDStoredVersions, SourceDiscovery, SourceStorageState},
		},
		wantNot:     []string{"example.com/v1"},
		wantReasons: []string{"the target cannot decode v1 (CRD storedVersions, StorageState)"},
	}, {
		// kube-controller-manager cut storedVersions to [v2] when its
		// migration started, and the migration failed: svm's cluster read
		// (maybestored.Unrecorded) says any version may be stored.
		name: "storedVersions cut by a failed in-tree migration",
		in: func() Input {
			in := cluster(target("widgets.example.com=v2"), widgetCRD("v2", true, "v2"))
			in.Unrecorded = map[schema.GroupResource]string{widgets: "in-tree migration user failed and none succeeded after it"}
			return in
		}(),
		want: VerdictUnsafe,
		wantStored: map[string][]Source{
			"example.com/v1": {SourceFailedInTreeMigration},
			"example.com/v2": {SourceCRDStoredVersions, SourceDiscovery, SourceFailedInTreeMigration},
		},
		wantNot:     []string{"example.com/v1"},
		wantAny:     true,
		wantReasons: []string{"the target cannot decode v1 (failed in-tree migration)", "in-tree migration user failed"},
	}, {
		name: "storedVersions cut by a failed in-tree migration, target decodes every version",
		in: func() Input {
			in := cluster(target("widgets.example.com=v1,v2"), widgetCRD("v2", true, "v2"))
			in.Unrecorded = map[schema.GroupResource]string{widgets: "in-tree migration user failed and none succeeded after it"}
			return in
		}(),
		want: VerdictSafe,
		wantStored: map[string][]Source{
			"example.com/v1": {SourceFailedInTreeMigration},
			"example.com/v2": {SourceCRDStoredVersions, SourceDiscovery, SourceFailedInTreeMigration},
		},
		wantAny:     true,
		wantReasons: []string{"an in-tree migration failed after storedVersions were cut, so any version may be stored"},
	}, {
		name: "flipped while svm was down",
		in:   cluster(target("widgets.example.com=v2"), state(widgets, widgetV1, widgetV1), widgetCRD("v2", true, "v1", "v2")),
		want: VerdictUnsafe,
		wantStored: map[string][]Source{
			"example.com/v1": {SourceCRDStoredVersions, SourceStorageState},
			"example.com/v2": {SourceCRDStoredVersions, SourceDiscovery},
		},
		wantNot:     []string{"example.com/v1"},
		wantReasons: []string{"the target cannot decode v1", "svm has not recorded the current storage version yet"},
	}, {
		// storedVersions was not pruned (or svm's pruning is off): the API
		// server still counts v1, and so does svm.
		name: "state migrated, storedVersions not pruned",
		in:   cluster(target("widgets.example.com=v2"), state(widgets, widgetV2, widgetV2), widgetCRD("v2", true, "v1", "v2")),
		want: VerdictUnsafe,
		wantStored: map[string][]Source{
			"example.com/v1": {SourceCRDStoredVersions},
			"example.com/v2": {SourceCRDStoredVersions, SourceDiscovery, SourceStorageState},
		},
		wantNot:     []string{"example.com/v1"},
		wantReasons: []string{"the target cannot decode v1 (CRD storedVersions)"},
	}, {
		name: "Unknown, target decodes every version seen",
		in:   cluster(target("widgets.example.com=v1,v2"), state(widgets, widgetV2, unknownHash), widgetCRD("v2", true, "v2")),
		want: VerdictSafe,
		wantStored: map[string][]Source{
			"example.com/v1": {SourceStorageStateUnknown},
			"example.com/v2": {SourceCRDStoredVersions, SourceDiscovery, SourceStorageState, SourceStorageStateUnknown},
		},
		wantAny:     true,
		wantReasons: []string{"the StorageState lists Unknown, so any version may be stored; the target decodes every version svm sees for the resource: v1, v2"},
	}, {
		// v1 is no longer served but the CRD still has it: it counts.
		name: "Unknown, target misses an unserved version",
		in:   cluster(target("widgets.example.com=v2"), state(widgets, widgetV2, unknownHash), widgetCRD("v2", false, "v2")),
		want: VerdictUnsafe,
		wantStored: map[string][]Source{
			"example.com/v1": {SourceStorageStateUnknown},
			"example.com/v2": {SourceCRDStoredVersions, SourceDiscovery, SourceStorageState, SourceStorageStateUnknown},
		},
		wantNot:     []string{"example.com/v1"},
		wantAny:     true,
		wantReasons: []string{"the target cannot decode v1 (StorageState Unknown)"},
	}, {
		name:        "status never written counts as Unknown",
		in:          cluster(target("deployments.apps=v1"), state(deployments, "")),
		want:        VerdictSafe,
		wantStored:  map[string][]Source{"apps/v1": {SourceDiscovery, SourceStorageStateUnknown}},
		wantAny:     true,
		wantReasons: []string{"any version may be stored"},
	}, {
		name:        "current hash Unknown counts as any version",
		in:          cluster(target("deployments.apps=v1"), state(deployments, unknownHash, deployV1)),
		want:        VerdictSafe,
		wantStored:  map[string][]Source{"apps/v1": {SourceDiscovery, SourceStorageState, SourceStorageStateUnknown}},
		wantAny:     true,
		wantReasons: []string{"any version may be stored"},
	}, {
		name:        "hash of no version svm can see",
		in:          cluster(target("deployments.apps=v1"), state(deployments, deployV1, "AAAAAAAAAAA=", deployV1)),
		want:        VerdictUnknown,
		wantStored:  map[string][]Source{"apps/v1": {SourceDiscovery, SourceStorageState}},
		wantReasons: []string{"recorded hash AAAAAAAAAAA= matches no version of Deployment svm can see"},
	}, {
		name:        "unsafe outranks unknown",
		in:          cluster(target("deployments.apps=v1beta2"), state(deployments, deployV1, "AAAAAAAAAAA=", deployV1)),
		want:        VerdictUnsafe,
		wantStored:  map[string][]Source{"apps/v1": {SourceDiscovery, SourceStorageState}},
		wantNot:     []string{"apps/v1"},
		wantReasons: []string{"the target cannot decode v1", "recorded hash AAAAAAAAAAA="},
	}, {
		name: "a version named only by the target resolves a hash",
		in: cluster(target("widgets.example.com=v2,preview"),
			state(widgets, widgetV2, resources.StorageVersionHash("example.com", "preview", "Widget"), widgetV2), widgetCRD("v2", true, "v2")),
		want: VerdictSafe,
		wantStored: map[string][]Source{
			"example.com/v2":      {SourceCRDStoredVersions, SourceDiscovery, SourceStorageState},
			"example.com/preview": {SourceStorageState},
		},
		wantReasons: []string{"preview, v2 may be stored, and the target decodes them all"},
	}, {
		name:        "no StorageState, the CRD's storedVersions suffice",
		in:          cluster(target("widgets.example.com=v2"), widgetCRD("v2", true, "v2")),
		want:        VerdictSafe,
		wantStored:  map[string][]Source{"example.com/v2": {SourceCRDStoredVersions, SourceDiscovery}},
		wantReasons: []string{"only v2 may be stored", "no StorageState; the CRD's status.storedVersions"},
	}, {
		name:        "no StorageState for a built-in resource",
		in:          cluster(target("deployments.apps=v1"), state(widgets, widgetV2, widgetV2)),
		want:        VerdictUnknown,
		wantStored:  map[string][]Source{"apps/v1": {SourceDiscovery}},
		wantReasons: []string{"no StorageState: svm has not recorded which versions were stored before"},
	}, {
		name: "svm's CRDs not installed",
		in: func() Input {
			in := cluster(target("deployments.apps=v1"), state(deployments, deployV1, deployV1))
			// Its StorageStates are ignored when svm's API is not served.
			in.SVMServed = false
			return in
		}(),
		want:        VerdictUnknown,
		wantStored:  map[string][]Source{"apps/v1": {SourceDiscovery}},
		wantReasons: []string{"no StorageState (svm's CRDs are not installed)"},
	}, {
		name:        "a resource svm knows nothing of",
		in:          cluster(target("gadgets.example.com=v1")),
		want:        VerdictUnknown,
		wantStored:  map[string][]Source{},
		wantReasons: []string{"svm knows nothing of this resource: it is not served and has no StorageState, CRD or StorageVersion"},
	}, {
		name:        "StorageState of a resource no longer served",
		in:          cluster(target("gadgets.example.com=v1"), state(gadgets, "BBBBBBBBBBB=", "BBBBBBBBBBB=")),
		want:        VerdictUnknown,
		wantStored:  map[string][]Source{},
		wantReasons: []string{"recorded hash BBBBBBBBBBB= matches no version (the resource is not served, so its kind is unknown)"},
	}, {
		name: "discovery failed for the group",
		in: func() Input {
			in := cluster(target("deployments.apps=v1"), state(deployments, deployV1, deployV1))
			in.Discovery.FailedGroupVersions = []schema.GroupVersion{gv("apps", "v1")}
			return in
		}(),
		want:        VerdictUnknown,
		wantStored:  map[string][]Source{"apps/v1": {SourceDiscovery, SourceStorageState}},
		wantReasons: []string{"discovery of apps/v1 failed"},
	}, {
		name: "API servers agree",
		in: cluster(target("deployments.apps=v1"), state(deployments, deployV1, deployV1),
			storageVersion("apps.deployments", server("apiserver-a", "apps/v1", "apps/v1", "apps/v1beta2", "apps/v1beta1"))),
		want:        VerdictSafe,
		wantStored:  map[string][]Source{"apps/v1": {SourceDiscovery, SourceStorageState, SourceStorageVersionAPI}},
		wantReasons: []string{"only v1 may be stored"},
	}, {
		name: "API servers disagree, even when the target decodes both",
		in:   cluster(target("deployments.apps=v1,v1beta2"), state(deployments, deployV1, deployV1), disagreeing),
		want: VerdictUnsafe,
		wantStored: map[string][]Source{
			"apps/v1beta2": {SourceStorageVersionAPI},
			"apps/v1":      {SourceDiscovery, SourceStorageState, SourceStorageVersionAPI},
		},
		wantDisagree: true,
		wantReasons:  []string{"API servers write different versions (v1beta2 by apiserver-b; v1 by apiserver-a): unsafe while the upgrade is under way"},
	}, {
		name: "API servers disagree and the target cannot decode one",
		in:   cluster(target("deployments.apps=v1"), state(deployments, deployV1, deployV1), disagreeing),
		want: VerdictUnsafe,
		wantStored: map[string][]Source{
			"apps/v1beta2": {SourceStorageVersionAPI},
			"apps/v1":      {SourceDiscovery, SourceStorageState, SourceStorageVersionAPI},
		},
		wantNot:      []string{"apps/v1beta2"},
		wantDisagree: true,
		wantReasons:  []string{"the target cannot decode v1beta2 (StorageVersion API)", "API servers write different versions"},
	}, {
		// A StorageVersion whose common version is unset while only one
		// server reports: the record says the servers have not agreed.
		name: "common encoding version unset",
		in: func() Input {
			sv := storageVersion("apps.deployments", server("apiserver-a", "apps/v1", "apps/v1"))
			sv.Status.CommonEncodingVersion = nil
			return cluster(target("deployments.apps=v1"), state(deployments, deployV1, deployV1), sv)
		}(),
		want:         VerdictUnsafe,
		wantStored:   map[string][]Source{"apps/v1": {SourceDiscovery, SourceStorageState, SourceStorageVersionAPI}},
		wantDisagree: true,
		wantReasons:  []string{"the API servers have not agreed on an encoding version (v1 by apiserver-a)"},
	}, {
		// kube-apiserver v1.37 stores CRDs as v1beta1 and serves only v1.
		name:        "stored in a version that is not served",
		in:          cluster(target("customresourcedefinitions.apiextensions.k8s.io=v1"), state(crds, crdHash, crdHash)),
		want:        VerdictUnsafe,
		wantStored:  map[string][]Source{"apiextensions.k8s.io/v1beta1": {SourceDiscovery, SourceStorageState}},
		wantNot:     []string{"apiextensions.k8s.io/v1beta1"},
		wantReasons: []string{"the target cannot decode v1beta1 (discovery, StorageState)"},
	}, {
		name: "StorageVersions ignored when the API is not served",
		in: func() Input {
			in := cluster(target("deployments.apps=v1"), state(deployments, deployV1, deployV1),
				storageVersion("apps.deployments", server("apiserver-a", "apps/v1", "apps/v1"), server("apiserver-b", "apps/v1beta2", "apps/v1beta2")))
			in.StorageVersionAPIServed = false
			return in
		}(),
		want:        VerdictSafe,
		wantStored:  map[string][]Source{"apps/v1": {SourceDiscovery, SourceStorageState}},
		wantReasons: []string{"only v1 may be stored"},
	}, {
		name: "Unknown and no version seen",
		in: func() Input {
			in := cluster(target("gadgets.example.com=v1"), state(gadgets, "", unknownHash))
			in.Discovery = Discovery{}
			return in
		}(),
		want:        VerdictUnknown,
		wantStored:  map[string][]Source{},
		wantAny:     true,
		wantReasons: []string{"the StorageState lists Unknown and svm sees no version of the resource"},
	}, {
		name: "svm's StorageState says the servers' discovery disagrees (no StorageVersion API): no retirement offered",
		in: cluster(target("deployments.apps=v1"), func() migrationv1alpha1.StorageState {
			s := state(deployments, unknownHash, deployV1beta2, deployV1)
			s.Status.ServersDisagree = "API servers store it in different versions: storage version hash " + deployV1beta2 + " on https://10.0.0.12:6443"
			return s
		}()),
		want:         VerdictUnsafe,
		wantStored:   map[string][]Source{"apps/v1beta2": {SourceStorageState}, "apps/v1": {SourceDiscovery, SourceStorageState, SourceStorageStateUnknown}},
		wantNot:      []string{"apps/v1beta2"},
		wantAny:      true,
		wantDisagree: true,
		wantReasons:  []string{"the target cannot decode v1beta2", "API servers may write different versions (svm's StorageState): API servers store it in different versions"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.in)
			if len(r.Resources) != 1 {
				t.Fatalf("%d resources, want 1", len(r.Resources))
			}
			got := r.Resources[0]
			if got.Verdict != tt.want || r.Verdict != tt.want {
				t.Errorf("verdict %s (report %s), want %s; reasons %q", got.Verdict, r.Verdict, tt.want, got.Reasons)
			}
			stored := map[string][]Source{}
			for _, s := range got.Stored {
				stored[s.Version] = s.Sources
			}
			if diff := cmp.Diff(tt.wantStored, stored); diff != "" {
				t.Errorf("stored (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(append([]string{}, tt.wantNot...), got.NotDecodable); diff != "" {
				t.Errorf("not decodable (-want +got):\n%s", diff)
			}
			if got.AnyVersion != tt.wantAny || got.ServersDisagree != tt.wantDisagree {
				t.Errorf("anyVersion %v, serversDisagree %v; want %v, %v", got.AnyVersion, got.ServersDisagree, tt.wantAny, tt.wantDisagree)
			}
			if got.ServersDisagree && len(got.Fix) > 0 {
				t.Errorf("fix %q while the API servers disagree: a retirement now would leave behind what the old ones write", got.Fix)
			}
			all := strings.Join(got.Reasons, " | ")
			at := 0
			for _, want := range tt.wantReasons {
				i := strings.Index(all[at:], want)
				if i < 0 {
					t.Errorf("reasons %q lack %q (after the earlier ones)", got.Reasons, want)
					break
				}
				at += i + len(want)
			}
		})
	}
}

func TestCheckReport(t *testing.T) {
	in := Input{
		Target:    target("widgets.example.com=v2", "deployments.apps=v1", "gadgets.example.com=v1"),
		Discovery: discovery(widgetV2), SVMServed: true,
		StorageStates: []migrationv1alpha1.StorageState{
			state(widgets, widgetV2, widgetV2), state(deployments, deployV1, deployV1), state(schema.GroupResource{Resource: "secrets"}, secretV1, secretV1),
		},
		CRDs: []apiextensionsv1.CustomResourceDefinition{widgetCRD("v2", true, "v2")},
	}
	r := Check(in)
	// gadgets is unknown and nothing is unsafe.
	if r.Verdict != VerdictUnknown {
		t.Errorf("verdict %s, want unknown", r.Verdict)
	}
	var names []string
	for _, res := range r.Resources {
		names = append(names, res.Name)
	}
	if diff := cmp.Diff([]string{"deployments.apps", "gadgets.example.com", "widgets.example.com"}, names); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"secrets"}, r.NotChecked); diff != "" {
		t.Errorf("not checked (-want +got):\n%s", diff)
	}
	in.Target = target("widgets.example.com=v1", "deployments.apps=v1", "gadgets.example.com=v1")
	if r := Check(in); r.Verdict != VerdictUnsafe {
		t.Errorf("verdict %s with an unsafe resource, want unsafe", r.Verdict)
	}
}

// The golden cases: what an operator sees around a CRD storage flip and an
// API server upgrade.
func goldenCases() map[string]Input {
	sv := func(servers ...apiserverinternalv1alpha1.ServerStorageVersion) []apiserverinternalv1alpha1.StorageVersion {
		return []apiserverinternalv1alpha1.StorageVersion{
			storageVersion("apps.deployments", servers...),
			storageVersion("apiextensions.k8s.io.customresourcedefinitions", server("apiserver-a", "apiextensions.k8s.io/v1beta1", "apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1")),
			storageVersion("core.secrets", server("apiserver-a", "v1", "v1")),
		}
	}
	states := func(widgetStates ...string) []migrationv1alpha1.StorageState {
		return []migrationv1alpha1.StorageState{
			state(widgets, widgetStates[0], widgetStates[1:]...),
			state(deployments, deployV1, deployV1),
			state(crds, crdHash, crdHash),
			state(schema.GroupResource{Resource: "secrets"}, secretV1, unknownHash),
		}
	}
	return map[string]Input{
		"before-migration": {
			Target:    target("widgets.example.com=v2", "deployments.apps=v1", "customresourcedefinitions.apiextensions.k8s.io=v1,v1beta1"),
			Discovery: discovery(widgetV2), SVMServed: true,
			StorageStates: states(widgetV2, widgetV1, widgetV2),
			CRDs:          []apiextensionsv1.CustomResourceDefinition{widgetCRD("v2", true, "v1", "v2")},
		},
		"after-migration": {
			Target:    target("widgets.example.com=v2", "deployments.apps=v1", "customresourcedefinitions.apiextensions.k8s.io=v1,v1beta1"),
			Discovery: discovery(widgetV2), SVMServed: true,
			StorageStates: states(widgetV2, widgetV2),
			CRDs:          []apiextensionsv1.CustomResourceDefinition{widgetCRD("v2", true, "v2")},
		},
		"servers-disagree": {
			Target:    target("deployments.apps=v1", "customresourcedefinitions.apiextensions.k8s.io=v1", "secrets=v1"),
			Discovery: discovery(widgetV2), SVMServed: true, StorageVersionAPIServed: true,
			StorageStates: states(widgetV2, widgetV2),
			StorageVersions: sv(
				server("apiserver-a", "apps/v1", "apps/v1", "apps/v1beta2", "apps/v1beta1"),
				server("apiserver-b", "apps/v1beta2", "apps/v1beta2", "apps/v1beta1")),
		},
		"unknown": {
			Target:    target("secrets=v1", "gadgets.example.com=v1", "widgets.example.com=v2"),
			Discovery: discovery(widgetV2),
			CRDs:      []apiextensionsv1.CustomResourceDefinition{widgetCRD("v2", true, "v2")},
		},
	}
}

func TestCheckGolden(t *testing.T) {
	for name, in := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			r := Check(in)
			var table, js, y bytes.Buffer
			if err := WriteTable(&table, r); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&js, r); err != nil {
				t.Fatal(err)
			}
			if err := WriteYAML(&y, r); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, name+".txt", table.Bytes())
			golden.Check(t, name+".json", js.Bytes())
			golden.DecodesJSON(t, js.Bytes(), r)
			golden.DecodesYAML(t, y.Bytes(), r)
			for _, line := range strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n") {
				if line != strings.TrimRight(line, " ") {
					t.Errorf("line ends in spaces: %q", line)
				}
			}
		})
	}
}

// Check must not depend on the order objects were listed in.
func TestCheckIsOrderIndependent(t *testing.T) {
	for name, in := range goldenCases() {
		want := Check(in)
		slices.Reverse(in.StorageStates)
		slices.Reverse(in.CRDs)
		slices.Reverse(in.StorageVersions)
		slices.Reverse(in.Discovery.Resources)
		if diff := cmp.Diff(want, Check(in)); diff != "" {
			t.Errorf("%s: reversed input changes the report (-want +got):\n%s", name, diff)
		}
	}
}

// TestStorageVersionObjectOverrulesARecordedDisagreement: svm recorded
// that the servers disagreed and stopped; the StorageVersion API, read
// now, says they agree, so the retirement that fixes the resource is
// offered.
func TestStorageVersionObjectOverrulesARecordedDisagreement(t *testing.T) {
	s := state(deployments, unknownHash, deployV1beta2, deployV1)
	s.Status.ServersDisagree = "API servers encode it in different versions (StorageVersion API): apiserver-a in apps/v1, apiserver-b in apps/v1beta2"
	in := cluster(target("deployments.apps=v1"), s,
		storageVersion("apps.deployments", server("apiserver-a", "apps/v1", "apps/v1", "apps/v1beta2"), server("apiserver-b", "apps/v1", "apps/v1", "apps/v1beta2")))
	got := Check(in).Resources[0]
	if got.ServersDisagree || got.Verdict != VerdictUnsafe || len(got.Fix) == 0 {
		t.Errorf("serversDisagree %v, verdict %s, fix %q; want no disagreement, unsafe, a retirement offered (reasons %q)", got.ServersDisagree, got.Verdict, got.Fix, got.Reasons)
	}
}
