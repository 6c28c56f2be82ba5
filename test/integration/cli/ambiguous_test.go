package cli_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestMigrateAmbiguousNames reproduces the report: two CRDs, widgets in
// a.example and b.example, both with short name amb, each with objects
// stored in v1 and v2 now their storage version. A name that fits both is
// an error naming both, before anything is listed or written, even beside
// a name that is not ambiguous; the full name migrates that one alone.
//
// It has a control plane of its own: every NewResource on the shared one is
// a Widget called widgets too, so `widgets` and `Widget` would name those as
// well, and the API server's request counts by plural would count their
// requests.
func TestMigrateAmbiguousNames(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)
	a := framework.Resource{Group: "a.example", Plural: "widgets", Kind: "Widget"}
	b := framework.Resource{Group: "b.example", Plural: "widgets", Kind: "Widget"}
	const n = 50
	for _, r := range []framework.Resource{a, b} {
		env.CreateResourceWithShortNames(t, r, "amb")
		env.CreateObjects(t, r, []string{"default"}, n)
		env.FlipStorage(t, r)
		env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v1": n})
	}
	revisionsA, revisionsB := env.ModRevisions(t, a.EtcdPrefix()), env.ModRevisions(t, b.EtcdPrefix())
	if len(revisionsA) != n || len(revisionsB) != n {
		t.Fatalf("etcd holds %d and %d widgets, want %d each", len(revisionsA), len(revisionsB), n)
	}
	// The API server counts requests by plural, which both share: any
	// request to either resource shows.
	updates, lists := env.ServerWrites(t, "widgets"), env.ServerRequests(t, "LIST", "widgets")

	for _, args := range [][]string{
		{"widgets"},                  // plural
		{"amb"},                      // short name
		{"Widget"},                   // kind
		{"widgets.a.example", "amb"}, // one good name does not start a partial migration
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, stderr := framework.RunSVM(t, kubeconfig, time.Minute, append([]string{"migrate"}, args...)...)
			if code == 0 {
				t.Fatalf("svm migrate %s exited 0\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout, stderr)
			}
			// One line on stderr and nothing else: no log lines, no
			// summary of a migration begun.
			want := fmt.Sprintf("svm: resource %q is ambiguous: it names widgets.a.example and widgets.b.example; name one in full\n", args[len(args)-1])
			if stderr != want {
				t.Errorf("stderr:\n%q\nwant:\n%q", stderr, want)
			}
			if stdout != "" {
				t.Errorf("stdout not empty:\n%s", stdout)
			}
		})
	}
	if got := env.ServerWrites(t, "widgets") - updates; got != 0 {
		t.Errorf("the API server saw %d writes (PUT and PATCH) to widgets, want none", got)
	}
	if got := env.ServerRequests(t, "LIST", "widgets") - lists; got != 0 {
		t.Errorf("the API server saw %d LIST requests to widgets, want none", got)
	}
	env.ExpectStored(t, a.EtcdPrefix(), map[string]int{"a.example/v1": n})
	env.ExpectStored(t, b.EtcdPrefix(), map[string]int{"b.example/v1": n})
	if !maps.Equal(revisionsA, env.ModRevisions(t, a.EtcdPrefix())) || !maps.Equal(revisionsB, env.ModRevisions(t, b.EtcdPrefix())) {
		t.Error("etcd values of widgets were written")
	}

	// Named in full, one migrates and the other is left alone.
	code, stdout, stderr := framework.RunSVM(t, kubeconfig, 2*time.Minute, "migrate", "widgets.a.example")
	if code != 0 {
		t.Fatalf("svm migrate widgets.a.example exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !onlyAbout(stdout, "widgets.a.example") {
		t.Errorf("output should tell of widgets.a.example alone:\n%s", stdout)
	}
	env.ExpectStored(t, a.EtcdPrefix(), map[string]int{"a.example/v2": n})
	env.ExpectStored(t, b.EtcdPrefix(), map[string]int{"b.example/v1": n})
	if !maps.Equal(revisionsB, env.ModRevisions(t, b.EtcdPrefix())) {
		t.Error("etcd values of widgets.b.example were written")
	}
	if got := env.ServerWrites(t, "widgets") - updates; got != n {
		t.Errorf("the API server saw %d writes (PUT and PATCH) to widgets, want %d", got, n)
	}
}

// TestMigrateSharedStorageName checks, against a real API server, that the
// one storage of events and events.events.k8s.io is not an ambiguity:
// discovery reports both with one storageVersionHash, and `svm migrate
// events` (or Event) migrates it once, under its core name, as --all does;
// named in full, events.events.k8s.io is taken as named. It counts every
// LIST of events the API server serves, so it has a control plane of its
// own.
func TestMigrateSharedStorageName(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)
	for _, name := range []string{"events", "Event", "events.events.k8s.io"} {
		lists := env.ServerRequests(t, "LIST", "events")
		code, stdout, stderr := framework.RunSVM(t, kubeconfig, time.Minute, "migrate", name)
		if code != 0 {
			t.Fatalf("svm migrate %s exited %d\nstdout:\n%s\nstderr:\n%s", name, code, stdout, stderr)
		}
		// One migration lists once: a fresh control plane holds fewer
		// events than fill a page. A second, of the other name, would
		// list again.
		if got := env.ServerRequests(t, "LIST", "events") - lists; got != 1 {
			t.Errorf("svm migrate %s listed events %d times, want once", name, got)
		}
		want := "events"
		if strings.Contains(name, ".") {
			want = name
		}
		if !onlyAbout(stdout, want) {
			t.Errorf("svm migrate %s should migrate %s alone:\n%s", name, want, stdout)
		}
	}
}

// onlyAbout tells whether out has lines and each tells of resource name: it
// begins with name and a space or colon.
func onlyAbout(out, name string) bool {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		rest, ok := strings.CutPrefix(l, name)
		if !ok || rest == "" || rest[0] != ' ' && rest[0] != ':' {
			return false
		}
	}
	return out != ""
}
