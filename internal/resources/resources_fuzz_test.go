package resources

import (
	"cmp"
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Pools the fuzzer picks discovery documents from: group versions
// (one unparsable), resource names (subresources among them), verbs and
// hashes, some shared between resources as events and
// events.events.k8s.io share theirs.
var (
	fuzzGroupVersions = []string{"v1", "apps/v1", "events.k8s.io/v1", "example.com/v1", "example.com/v2", "metrics.example.com/v1beta1", "a/b/c"}
	fuzzNames         = []string{"events", "pods", "pods/status", "widgets", "secrets", "deployments", "things", "tokenreviews"}
	fuzzVerbs         = []string{"list", "patch", "get", "create", "update", "watch", "delete"}
	fuzzHashes        = []string{"", StorageVersionHash("", "v1", "Event"), StorageVersionHash("", "v1", "Pod"), StorageVersionHash("example.com", "v1", "Widget"), "x"}
)

// discoveryFrom turns fuzz bytes into what ServerPreferredResources
// returns: one list per group version, and each group and resource once
// (discovery keeps the preferred version of each).
func discoveryFrom(data []byte) []*metav1.APIResourceList {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	lists := map[string]*metav1.APIResourceList{}
	var order []string
	seen := map[schema.GroupResource]bool{}
	for len(data) > 0 {
		gvString := fuzzGroupVersions[next()%len(fuzzGroupVersions)]
		name := fuzzNames[next()%len(fuzzNames)]
		mask := next()
		hash := fuzzHashes[next()%len(fuzzHashes)]
		gv, _ := schema.ParseGroupVersion(gvString)
		if gr := (schema.GroupResource{Group: gv.Group, Resource: name}); seen[gr] {
			continue
		} else {
			seen[gr] = true
		}
		var verbs metav1.Verbs
		for i, v := range fuzzVerbs {
			if mask&(1<<i) != 0 {
				verbs = append(verbs, v)
			}
		}
		list := lists[gvString]
		if list == nil {
			list = &metav1.APIResourceList{GroupVersion: gvString}
			lists[gvString] = list
			order = append(order, gvString)
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: name, Kind: "K" + name, Verbs: verbs, StorageVersionHash: hash})
	}
	out := make([]*metav1.APIResourceList, 0, len(order))
	for _, gv := range order {
		out = append(out, lists[gv])
	}
	return out
}

func migratable(r metav1.APIResource, gvString string) bool {
	_, err := schema.ParseGroupVersion(gvString)
	return err == nil && !strings.Contains(r.Name, "/") && slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "patch")
}

func deepCopyLists(lists []*metav1.APIResourceList) []*metav1.APIResourceList {
	out := make([]*metav1.APIResourceList, len(lists))
	for i, l := range lists {
		out[i] = l.DeepCopy()
	}
	return out
}

// FuzzMigratable checks, for any discovery document, that Migratable keeps
// exactly the resources svm can migrate, once per storage: each it returns
// can be listed and patched; each that can is returned or shares its
// storage with one that is (and the one kept is the first by group and
// resource); the result does not depend on the order discovery answered
// in; and it leaves its input alone.
func FuzzMigratable(f *testing.F) {
	f.Add([]byte{0, 0, 3, 1, 2, 0, 3, 1, 0, 1, 3, 2})     // events in v1 and events.k8s.io, pods
	f.Add([]byte{3, 3, 3, 3, 4, 3, 3, 3, 5, 6, 3, 0})     // widgets twice (discovery keeps one version), a thing without hash
	f.Add([]byte{6, 4, 3, 0, 0, 2, 3, 0, 0, 7, 8, 0})     // unparsable group version, a subresource, tokenreviews
	f.Add([]byte{1, 5, 255, 4, 2, 4, 255, 4, 4, 5, 1, 4}) // three sharing one hash, one not patchable
	f.Fuzz(func(t *testing.T, data []byte) {
		lists := discoveryFrom(data)
		before := deepCopyLists(lists)
		got := Migratable(lists)
		if diff := gocmp.Diff(before, lists); diff != "" {
			t.Fatalf("Migratable changed its input (-before +after):\n%s", diff)
		}

		type source struct {
			r  metav1.APIResource
			gv schema.GroupVersion
		}
		eligible := map[schema.GroupResource]source{}
		for _, l := range lists {
			for _, r := range l.APIResources {
				if migratable(r, l.GroupVersion) {
					gv, _ := schema.ParseGroupVersion(l.GroupVersion)
					eligible[gv.WithResource(r.Name).GroupResource()] = source{r, gv}
				}
			}
		}
		kept := map[string]schema.GroupResource{}
		for i, r := range got {
			src, ok := eligible[r.GroupResource()]
			if !ok {
				t.Fatalf("Migratable kept %v, which cannot be listed and patched (or is a subresource)", r.GroupVersionResource)
			}
			if want := (Resource{GroupVersionResource: src.gv.WithResource(src.r.Name), Kind: src.r.Kind, StorageVersionHash: src.r.StorageVersionHash}); r != want {
				t.Errorf("Migratable returned %+v for discovery's %+v", r, want)
			}
			if i > 0 && cmp.Or(cmp.Compare(got[i-1].Group, r.Group), cmp.Compare(got[i-1].Resource, r.Resource)) >= 0 {
				t.Errorf("not sorted by group and resource: %v before %v", got[i-1].GroupResource(), r.GroupResource())
			}
			if r.StorageVersionHash == "" {
				continue
			}
			if other, dup := kept[r.StorageVersionHash]; dup {
				t.Errorf("%v and %v share storage (hash %s) and were both kept", other, r.GroupResource(), r.StorageVersionHash)
			}
			kept[r.StorageVersionHash] = r.GroupResource()
		}
		for gr, src := range eligible {
			hash := src.r.StorageVersionHash
			if hash == "" {
				if !slices.ContainsFunc(got, func(r Resource) bool { return r.GroupResource() == gr }) {
					t.Errorf("%v has no hash and was dropped: svm cannot tell it shares storage", gr)
				}
				continue
			}
			keeper, ok := kept[hash]
			if !ok {
				t.Errorf("%v (hash %s) is migratable but neither it nor a resource sharing its storage was kept", gr, hash)
				continue
			}
			if cmp.Or(cmp.Compare(gr.Group, keeper.Group), cmp.Compare(gr.Resource, keeper.Resource)) < 0 {
				t.Errorf("kept %v for hash %s, but %v sorts first", keeper, hash, gr)
			}
		}

		// Discovery answers in no particular order.
		shuffled := deepCopyLists(lists)
		slices.Reverse(shuffled)
		for _, l := range shuffled {
			slices.Reverse(l.APIResources)
		}
		if diff := gocmp.Diff(got, Migratable(shuffled)); diff != "" {
			t.Errorf("the result depends on discovery's order (-in order +reversed):\n%s", diff)
		}
	})
}

// FuzzStorageVersionHash checks the shape of the hashes svm computes for a
// CRD's storedVersions: 8 bytes in standard base64, as discovery reports
// them, and the same for the same input.
func FuzzStorageVersionHash(f *testing.F) {
	f.Add("", "v1", "Pod")
	f.Add("example.com", "v2", "Widget")
	f.Fuzz(func(t *testing.T, group, version, kind string) {
		h := StorageVersionHash(group, version, kind)
		raw, err := base64.StdEncoding.DecodeString(h)
		if err != nil || len(raw) != 8 {
			t.Errorf("StorageVersionHash(%q, %q, %q) = %q: not 8 bytes of base64 (%v)", group, version, kind, h, err)
		}
		if again := StorageVersionHash(group, version, kind); again != h {
			t.Errorf("StorageVersionHash(%q, %q, %q) = %q, then %q", group, version, kind, h, again)
		}
	})
}
