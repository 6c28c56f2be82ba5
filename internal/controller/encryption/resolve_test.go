package encryption

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// discoveryReads counts what discovery was asked since the last call:
// reads of every group version (ServerGroupsAndResources, which begins
// with the groups), and reads of one group version's resources alone.
func discoveryReads(e *env) (all, one int) {
	for _, a := range e.disc.Actions() {
		switch a.GetResource().Resource {
		case "group":
			all++
		case "resource":
			one++
		}
	}
	one -= all // ServerGroupsAndResources reads the resources too
	e.disc.ClearActions()
	return all, one
}

// A round after the first reads only the group versions the resources
// to re-encrypt resolved in, one request each, and decides as the first.
func TestRoundsResolveOverTheirGroupVersionsAlone(t *testing.T) {
	loaded := t0.Add(-10 * time.Minute)
	e := newEnv(t, setup{
		servers:   []apiServer{{id: "apiserver-a", config: config2, loadedAt: loaded}},
		resources: []string{"secrets", "configmaps", "widgets.example.com"},
		objects:   []client.Object{storageState("secrets", nil), storageState("configmaps", nil)},
	})
	e.reconcile(t)
	if all, one := discoveryReads(e); all != 1 || one != 0 {
		t.Errorf("first round: %d reads of every group version and %d of one; want every one read once", all, one)
	}
	first := names(e.migrations(t))
	if len(first) != 2 {
		t.Fatalf("migrations %v after the first round, want re-encryptions of secrets and configmaps", first)
	}
	for range 2 {
		e.clock.Step(time.Minute)
		e.reconcile(t)
		// v1 is read once for secrets and configmaps, example.com/v1 for widgets.
		if all, one := discoveryReads(e); all != 0 || one != 2 {
			t.Errorf("later round: %d reads of every group version and %d of one; want none and 2", all, one)
		}
		if got := names(e.migrations(t)); !slices.Equal(got, first) {
			t.Errorf("migrations %v after a later round, want %v as after the first", got, first)
		}
	}
	want := map[string]schema.GroupVersion{"secrets": {Version: "v1"}, "configmaps": {Version: "v1"}, "widgets.example.com": {Group: "example.com", Version: "v1"}}
	for name, gv := range want {
		if got := e.c.resolvedIn[name]; got != gv {
			t.Errorf("%s resolved in %s, want %s", name, got, gv)
		}
	}
}

// A name whose group version no longer serves it is resolved again over
// every group version, as at the first round.
func TestRoundsResolveAgainWhenTheGroupVersionIsGone(t *testing.T) {
	e := newEnv(t, setup{
		servers:   []apiServer{{id: "apiserver-a", config: config2, loadedAt: t0.Add(-10 * time.Minute)}},
		resources: []string{"widgets.example.com"},
	})
	e.reconcile(t)
	discoveryReads(e)
	// example.com serves v2 now, and v1 no more.
	for _, l := range e.disc.Resources {
		if l.GroupVersion == "example.com/v1" {
			l.GroupVersion = "example.com/v2"
		}
	}
	e.clock.Step(time.Minute)
	e.reconcile(t)
	if all, one := discoveryReads(e); all != 1 || one != 1 {
		t.Errorf("%d reads of every group version and %d of one; want example.com/v1 read, then every one", all, one)
	}
	if got, want := e.c.resolvedIn["widgets.example.com"], (schema.GroupVersion{Group: "example.com", Version: "v2"}); got != want {
		t.Errorf("widgets resolved in %s, want %s", got, want)
	}
}

// A name that does not resolve is not remembered: every round reads every
// group version for it, as before.
func TestRoundsResolveUnresolvedNamesOverEverything(t *testing.T) {
	e := newEnv(t, setup{
		servers:   []apiServer{{id: "apiserver-a", config: config2, loadedAt: t0.Add(-10 * time.Minute)}},
		resources: []string{"gadgets.example.com"},
	})
	e.disc.Resources = append(e.disc.Resources, &metav1.APIResourceList{GroupVersion: "other.example.com/v1"})
	for range 2 {
		e.reconcile(t)
		if all, one := discoveryReads(e); all != 1 || one != 0 {
			t.Errorf("%d reads of every group version and %d of one; want every one read once a round", all, one)
		}
		e.clock.Step(time.Minute)
	}
	if _, ok := e.c.resolvedIn["gadgets.example.com"]; ok {
		t.Errorf("an unresolved name was remembered")
	}
}
