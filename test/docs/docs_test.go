package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/svm-project/svm/test/docs"
)

// repoRoot is found from this file, as test/framework.RepoRoot does, so the
// test reads the documentation of the checkout it was compiled from
// wherever go test runs it.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestDocsNameSvmResourcesWithGroup fails for every kubectl command in
// README.md and docs/*.md that names StorageVersionMigrations or
// StorageStates without a group: on Kubernetes 1.37+ kubectl resolves those
// to the in-tree storagemigration.k8s.io API, so the command would act on
// the wrong objects.
func TestDocsNameSvmResourcesWithGroup(t *testing.T) {
	root := repoRoot()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	if len(files) < 2 {
		t.Fatalf("found no docs/*.md under %s", root)
	}
	total := 0
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		for _, c := range docs.Commands(string(data)) {
			total++
			for _, w := range docs.Unqualified(c.Words) {
				t.Errorf("%s:%d: `%s` names %q without a group: write storageversionmigrations.migration.k8s.io or storagestates.migration.k8s.io, "+
					"or svm's short names svmigration and svmstate (on Kubernetes 1.37+ a plain storageversionmigrations is the in-tree storagemigration.k8s.io API)",
					rel, c.Line, c.Text, w)
			}
		}
	}
	// The README alone documents several kubectl commands, among them the
	// wait for svm's migrations; finding none means the scanner is broken,
	// not that the docs are clean.
	if total < 5 {
		t.Fatalf("found only %d kubectl commands in %d files; the scanner misses them", total, len(files))
	}
}

// findings runs both halves of the check on markdown, as "line: word".
func findings(markdown string) []string {
	var out []string
	for _, c := range docs.Commands(markdown) {
		for _, w := range docs.Unqualified(c.Words) {
			out = append(out, fmt.Sprintf("%d: %s", c.Line, w))
		}
	}
	return out
}

func TestFindings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		markdown string
		want     []string
	}{{
		name:     "wait on the plain plural in a code block",
		markdown: "Then:\n\n```sh\nkubectl create -f config/samples/migration_v1alpha1_storageversionmigration.yaml\nkubectl wait --for=condition=Succeeded storageversionmigrations --all\n```\n",
		want:     []string{"5: storageversionmigrations"},
	}, {
		name:     "get the plain plural inline",
		markdown: "The CRD prints columns: `kubectl get storageversionmigrations` shows them.\n",
		want:     []string{"1: storageversionmigrations"},
	}, {
		name:     "resource/name",
		markdown: "```\nkubectl get storageversionmigrations/widgets-1 -o yaml\n```\n",
		want:     []string{"2: storageversionmigrations/widgets-1"},
	}, {
		name:     "describe the singular StorageState",
		markdown: "- try `kubectl describe storagestate x`\n",
		want:     []string{"1: storagestate"},
	}, {
		name:     "kind, any case",
		markdown: "`kubectl get StorageVersionMigration`\n",
		want:     []string{"1: StorageVersionMigration"},
	}, {
		name:     "one of a list",
		markdown: "`kubectl get storageversionmigrations.migration.k8s.io,storagestates`\n",
		want:     []string{"1: storageversionmigrations.migration.k8s.io,storagestates"},
	}, {
		name:     "flag value resource/name, span across lines",
		markdown: "Events (`kubectl events --for\nstorageversionmigration/<name>`, and more)\n",
		want:     []string{"1: storageversionmigration/<name>"},
	}, {
		name:     "flag=value",
		markdown: "`kubectl events --for=storagestates/secrets`\n",
		want:     []string{"1: --for=storagestates/secrets"},
	}, {
		name:     "continuation line, inside a list item's indented block",
		markdown: "1. Wait:\n\n   ```sh\n   kubectl wait --for=condition=Succeeded \\\n     storageversionmigrations -l 'a=b' --timeout=1h\n   ```\n",
		want:     []string{"4: storageversionmigrations"},
	}, {
		name:     "kubectl inside a YAML string",
		markdown: "```yaml\nsummary: \"Migration failed (kubectl describe storageversionmigrations)\"\n```\n",
		want:     []string{"2: storageversionmigrations"},
	}, {
		name:     "a path to kubectl",
		markdown: "```\n./bin/kubectl get storagestates\n```\n",
		want:     []string{"2: storagestates"},
	}, {
		name:     "line numbers count every line",
		markdown: "# T\n\ntext\nmore text `svm status`\nand `kubectl get\nstoragestates`\n\n```\nsvm status\n\nkubectl get storagestate a\n```\n",
		want:     []string{"5: storagestates", "11: storagestate"},
	}, {
		name:     "svm's group",
		markdown: "```\nkubectl wait --for=condition=Succeeded storageversionmigrations.migration.k8s.io --all\nkubectl get storagestates.migration.k8s.io widgets.example.com -o jsonpath='{.status.persistedStorageVersionHashes}'\nkubectl get storageversionmigrations.migration.k8s.io/x\n```\n",
	}, {
		name:     "the in-tree group, named on purpose",
		markdown: "`kubectl get storageversionmigrations.storagemigration.k8s.io`\n",
	}, {
		name:     "group and version",
		markdown: "`kubectl get storageversionmigrations.v1alpha1.migration.k8s.io`\n",
	}, {
		name:     "short names and the category",
		markdown: "`kubectl get svmigration`, `kubectl get svmstate`, `kubectl get svm`\n",
	}, {
		name:     "prose and inline code that are not kubectl commands",
		markdown: "svm keeps StorageStates; kubectl get storageversionmigrations in prose is not code.\nPlain `storageversionmigrations` means the in-tree API; `svm migrate storagestates` is svm.\n",
	}, {
		name:     "a file named after the resource",
		markdown: "```\nkubectl create -f config/samples/migration_v1alpha1_storageversionmigration.yaml\nkubectl create -f storageversionmigration.yaml\n```\n",
	}, {
		name:     "a label or field selector mentioning it",
		markdown: "```\nkubectl get events --field-selector involvedObject.kind=StorageVersionMigration -l 'migration.k8s.io/created-by'\n```\n",
	}, {
		name:     "after a pipe, a comment or a semicolon it is another program",
		markdown: "```\nkubectl api-resources | grep storageversionmigrations\nkubectl get crd   # not storagestates\nkubectl get crd; echo storagestate\n```\n",
	}, {
		name:     "kubectl as part of another word",
		markdown: "`go build -o ~/bin/kubectl-svm storagestates`, kubectl's `storagestates`\n",
	}, {
		name:     "inside an unclosed span or after a closed fence",
		markdown: "```\nkubectl get svm\n```\ntext ``kubectl get storagestates\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, findings(tc.markdown)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCommands(t *testing.T) {
	md := strings.Join([]string{
		"Intro with `kubectl apply -k", // 1
		"config/default` inline.",      // 2
		"",                             // 3
		"~~~~sh",                       // 4
		"kubectl wait --for=condition=Succeeded \\",                                                  // 5
		"  storageversionmigrations.migration.k8s.io -l '!migration.k8s.io/created-by' --timeout=1h", // 6
		"~~~", // 7 (too short to close)
		"kubectl get -o json x | kubectl replace -f -", // 8
		"~~~~",                      // 9
		"kubectl get storagestates", // 10: prose, not code
	}, "\n")
	got := docs.Commands(md)
	want := []docs.Command{
		{Line: 1, Words: []string{"kubectl", "apply", "-k", "config/default"}, Text: "kubectl apply -k config/default"},
		{Line: 5, Words: []string{"kubectl", "wait", "--for=condition=Succeeded", "storageversionmigrations.migration.k8s.io", "-l", "!migration.k8s.io/created-by", "--timeout=1h"},
			Text: "kubectl wait --for=condition=Succeeded storageversionmigrations.migration.k8s.io -l '!migration.k8s.io/created-by' --timeout=1h"},
		{Line: 8, Words: []string{"kubectl", "get", "-o", "json", "x"}, Text: "kubectl get -o json x"},
		{Line: 8, Words: []string{"kubectl", "replace", "-f", "-"}, Text: "kubectl replace -f -"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
}

func TestUnqualified(t *testing.T) {
	for _, tc := range []struct {
		words []string
		want  []string
	}{
		{[]string{"kubectl", "get", "storageversionmigrations"}, []string{"storageversionmigrations"}},
		{[]string{"kubectl", "get", "storageversionmigrations."}, []string{"storageversionmigrations."}},
		{[]string{"kubectl", "get", "svm,storagestates", "storagestate/x"}, []string{"svm,storagestates", "storagestate/x"}},
		{[]string{"kubectl", "wait", "--for=condition=Succeeded", "storageversionmigrations.migration.k8s.io", "--all"}, nil},
		{[]string{"kubectl", "get", "-l", "migration.k8s.io/created-by=svm-trigger", "svmigration"}, nil},
		{[]string{"kubectl", "get", "-o", "jsonpath={.items[*].kind}", "crd", "storagestates.migration.k8s.io"}, nil},
		// The binary is not an argument.
		{[]string{"storagestates"}, nil},
	} {
		if diff := cmp.Diff(tc.want, docs.Unqualified(tc.words)); diff != "" {
			t.Errorf("Unqualified(%q) (-want +got):\n%s", tc.words, diff)
		}
	}
}

func TestShellCommands(t *testing.T) {
	md := strings.Join([]string{
		"Text.", // 1
		"",      // 2
		"```sh", // 3
		"svm migrate secrets   # after a rotation", // 4
		"# only a comment",                         // 5
		"",                                         // 6
		"helm install svm charts/svm \\",           // 7
		"  --set image.tag='<tag>'",                // 8
		"```",                                      // 9
		"```yaml",                                  // 10
		"kind: X",                                  // 11
		"```",                                      // 12
		"```",                                      // 13
		"make demo",                                // 14
		"```",                                      // 15
	}, "\n")
	fences := docs.Fences(md)
	var infos []string
	for _, f := range fences {
		infos = append(infos, fmt.Sprintf("%d %q %d", f.Line, f.Info, len(f.Code)))
	}
	if diff := cmp.Diff([]string{`3 "sh" 5`, `10 "yaml" 1`, `13 "" 1`}, infos); diff != "" {
		t.Errorf("fences (-want +got):\n%s", diff)
	}
	got, err := fences[0].ShellCommands()
	if err != nil {
		t.Fatal(err)
	}
	want := []docs.Command{
		{Line: 4, Words: []string{"svm", "migrate", "secrets"}, Text: "svm migrate secrets"},
		{Line: 7, Words: []string{"helm", "install", "svm", "charts/svm", "--set", "image.tag=<tag>"}, Text: "helm install svm charts/svm --set image.tag='<tag>'"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}

	compound := docs.Fences("```sh\nsvm status\ncd config/default && kustomize edit set image svm=x\n```\n")
	if _, err := compound[0].ShellCommands(); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("a line with two commands: error %v, want one naming line 3", err)
	}
}
