package manager

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

type leaseNamespaceTest struct {
	name    string
	in      leaseNamespaceInputs
	want    string
	wantWhy string
	wantErr string
}

func checkLeaseNamespace(t *testing.T, tests []leaseNamespaceTest) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why, err := chooseLeaseNamespace(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q (%s), error %v; want an error saying %q", got, why, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || !strings.Contains(why, tt.wantWhy) {
				t.Errorf("got %q because %q, want %q because of %q", got, why, tt.want, tt.wantWhy)
			}
		})
	}
}

// TestChooseLeaseNamespace checks the flag and, in a pod, the pod's
// namespace.
func TestChooseLeaseNamespace(t *testing.T) {
	checkLeaseNamespace(t, []leaseNamespaceTest{
		{
			name:    "the flag wins over everything",
			in:      leaseNamespaceInputs{Flag: "ops", InPod: true, PodNamespace: "svm-system", Kubectl: "team", KubectlFromFlag: true},
			want:    "ops",
			wantWhy: "--leader-election-namespace",
		},
		{
			name:    "in a pod, the pod's namespace, as controller-runtime chooses",
			in:      leaseNamespaceInputs{InPod: true, PodNamespace: "svm-system", Kubectl: "team", Context: "c", ContextNamespace: "team"},
			want:    "svm-system",
			wantWhy: "the pod's namespace",
		},
		{
			name:    "in a pod whose namespace cannot be read",
			in:      leaseNamespaceInputs{InPod: true, PodErr: errors.New("permission denied"), Kubectl: "default"},
			wantErr: "permission denied; set --leader-election-namespace",
		},
		{
			name:    "in a pod whose namespace file is empty",
			in:      leaseNamespaceInputs{InPod: true, Kubectl: "default"},
			wantErr: "is empty; set --leader-election-namespace",
		},
	})
}

// TestChooseLeaseNamespaceOutOfPod checks that out of a pod the namespace
// is kubectl's.
func TestChooseLeaseNamespaceOutOfPod(t *testing.T) {
	checkLeaseNamespace(t, []leaseNamespaceTest{
		{
			name:    "out of a pod, --namespace",
			in:      leaseNamespaceInputs{Kubectl: "team", KubectlFromFlag: true, Context: "c", ContextNamespace: "other"},
			want:    "team",
			wantWhy: "set by --namespace",
		},
		{
			name:    "out of a pod, the context's namespace",
			in:      leaseNamespaceInputs{Kubectl: "team", Context: "work", ContextNamespace: "team"},
			want:    "team",
			wantWhy: `the namespace of kubeconfig context "work"`,
		},
		{
			name:    "out of a pod, a context that names default",
			in:      leaseNamespaceInputs{Kubectl: "default", Context: "work", ContextNamespace: "default"},
			want:    "default",
			wantWhy: `the namespace of kubeconfig context "work"`,
		},
		{
			name:    "out of a pod, a context without a namespace: default",
			in:      leaseNamespaceInputs{Kubectl: "default", Context: "work"},
			want:    "default",
			wantWhy: `kubeconfig context "work" names no namespace: default`,
		},
		{
			name:    "out of a pod, kubectl's choice otherwise",
			in:      leaseNamespaceInputs{Kubectl: "elsewhere", Context: "work"},
			want:    "elsewhere",
			wantWhy: `kubectl's namespace for kubeconfig context "work"`,
		},
		{
			name:    "a kubeconfig that cannot be read",
			in:      leaseNamespaceInputs{KubectlErr: errors.New("invalid configuration")},
			wantErr: "invalid configuration; set --leader-election-namespace",
		},
		{
			name:    "no namespace at all",
			in:      leaseNamespaceInputs{},
			wantErr: "set --leader-election-namespace",
		},
	})
}

// TestReadLeaseNamespaceInputs reads real kubeconfig files through the
// kubectl flags, as svm controller does, and shows that the namespace
// chosen from them is kubectl's.
func TestReadLeaseNamespaceInputs(t *testing.T) {
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		// kubectl's loader would then take a context without a namespace
		// to mean the pod's.
		t.Skip("runs in a pod")
	}
	dir := t.TempDir()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["plain"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.Contexts["team"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: "team-a"}
	cfg.CurrentContext = "plain"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	podFile := filepath.Join(dir, "namespace")
	noPod := filepath.Join(dir, "absent")
	if err := os.WriteFile(podFile, []byte("svm-system"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name          string
		flag, ns, ctx string
		podFile       string
		want, wantWhy string
	}{
		{name: "context without a namespace", podFile: noPod, want: "default", wantWhy: `kubeconfig context "plain" names no namespace`},
		{name: "--context naming one with a namespace", ctx: "team", podFile: noPod, want: "team-a", wantWhy: `the namespace of kubeconfig context "team"`},
		{name: "--namespace", ns: "mine", ctx: "team", podFile: noPod, want: "mine", wantWhy: "set by --namespace"},
		{name: "in a pod", ns: "mine", ctx: "team", podFile: podFile, want: "svm-system", wantWhy: "the pod's namespace"},
		{name: "--leader-election-namespace", flag: "ops", ns: "mine", podFile: podFile, want: "ops", wantWhy: "--leader-election-namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flags := genericclioptions.NewConfigFlags(false)
			flags.KubeConfig = &kubeconfig
			flags.Namespace = &tt.ns
			flags.Context = &tt.ctx
			in := readLeaseNamespaceInputs(tt.flag, flags, tt.podFile)
			got, why, err := chooseLeaseNamespace(in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || !strings.Contains(why, tt.wantWhy) {
				t.Errorf("namespace %q because %q, want %q because of %q; inputs %+v", got, why, tt.want, tt.wantWhy, in)
			}
		})
	}
}

// testCRD is the CRD of one of svm's resources, serving and storing
// v1alpha1, changed by mods.
func testCRD(resource string, mods ...func(*apiextensionsv1.CustomResourceDefinition)) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: resource + "." + migrationv1alpha1.GroupVersion.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group:    migrationv1alpha1.GroupVersion.Group,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true, Storage: true}},
		},
	}
	for _, mod := range mods {
		mod(c)
	}
	return c
}

// withCondition adds a condition to a CRD.
func withCondition(typ apiextensionsv1.CustomResourceDefinitionConditionType, status apiextensionsv1.ConditionStatus, reason, message string) func(*apiextensionsv1.CustomResourceDefinition) {
	return func(c *apiextensionsv1.CustomResourceDefinition) {
		c.Status.Conditions = append(c.Status.Conditions, apiextensionsv1.CustomResourceDefinitionCondition{Type: typ, Status: status, Reason: reason, Message: message})
	}
}

type crdReadinessTest struct {
	name   string
	served []string
	crds   map[string]*apiextensionsv1.CustomResourceDefinition
	// listed false: the CRDs could not be listed (forbidden).
	unlisted bool
	// want is "ready", "fail: <text>" or "wait: <text>", the text a
	// part of the error or of the pending list.
	want string
}

func checkCRDReadiness(t *testing.T, tests []crdReadinessTest) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := crdReadiness(tt.served, tt.crds, !tt.unlisted)
			var got string
			switch {
			case v.ready && v.fail == nil && len(v.pending) == 0:
				got = "ready"
			case !v.ready && v.fail != nil && len(v.pending) == 0:
				got = "fail: " + v.fail.Error()
			case !v.ready && v.fail == nil && len(v.pending) > 0:
				got = "wait: " + strings.Join(v.pending, "; ")
			default:
				t.Fatalf("inconsistent verdict %+v", v)
			}
			kind, text, _ := strings.Cut(tt.want, ": ")
			if !strings.HasPrefix(got, kind+":") && got != kind || !strings.Contains(got, text) {
				t.Errorf("verdict %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCRDReadiness checks when svm controller may start, and when it
// cannot start at all.
func TestCRDReadiness(t *testing.T) {
	both := []string{"storageversionmigrations", "storagestates"}
	checkCRDReadiness(t, []crdReadinessTest{
		{name: "both served", served: both, want: "ready"},
		{name: "both served, CRDs not even read", served: append([]string{"storageversionmigrations/status"}, both...), unlisted: true, want: "ready"},
		{
			name: "no CRDs: the existing message",
			want: "fail: the server does not serve migration.k8s.io/v1alpha1: install svm's CRDs first (kubectl apply -k config/crd)",
		},
		{
			name:   "one CRD missing, the other served",
			served: []string{"storageversionmigrations"},
			want:   "fail: the server does not serve storagestates.migration.k8s.io: install svm's CRDs first",
		},
		{
			name: "one CRD missing, the other not established yet: no wait will bring the missing one",
			crds: map[string]*apiextensionsv1.CustomResourceDefinition{"storagestates": testCRD("storagestates")},
			want: "fail: the server does not serve storageversionmigrations.migration.k8s.io: install svm's CRDs first",
		},
		{
			name: "CRDs that may not be listed count as missing",
			crds: map[string]*apiextensionsv1.CustomResourceDefinition{
				"storageversionmigrations": testCRD("storageversionmigrations"), "storagestates": testCRD("storagestates"),
			},
			unlisted: true,
			want:     "fail: the server does not serve migration.k8s.io/v1alpha1: install svm's CRDs first",
		},
		{
			name:   "a CRD that does not serve svm's version never will",
			served: []string{"storageversionmigrations"},
			crds: map[string]*apiextensionsv1.CustomResourceDefinition{"storagestates": testCRD("storagestates", func(c *apiextensionsv1.CustomResourceDefinition) {
				c.Spec.Versions[0].Served = false
			})},
			want: "fail: CRD storagestates.migration.k8s.io does not serve v1alpha1",
		},
	})
}

// TestCRDReadinessWaits checks that CRDs being set up are waited for, and
// says why each is not served yet.
func TestCRDReadinessWaits(t *testing.T) {
	checkCRDReadiness(t, []crdReadinessTest{
		{
			name: "just created, no conditions yet",
			crds: map[string]*apiextensionsv1.CustomResourceDefinition{
				"storageversionmigrations": testCRD("storageversionmigrations"), "storagestates": testCRD("storagestates"),
			},
			want: "wait: storageversionmigrations.migration.k8s.io is not Established; storagestates.migration.k8s.io is not Established",
		},
		{
			name:   "names accepted, installing",
			served: []string{"storageversionmigrations"},
			crds: map[string]*apiextensionsv1.CustomResourceDefinition{"storagestates": testCRD("storagestates",
				withCondition(apiextensionsv1.NamesAccepted, apiextensionsv1.ConditionTrue, "NoConflicts", "no conflicts found"),
				withCondition(apiextensionsv1.Established, apiextensionsv1.ConditionFalse, "Installing", "the initial names have been accepted"))},
			want: "wait: storagestates.migration.k8s.io is not Established (Installing: the initial names have been accepted)",
		},
		{
			name:   "established, not yet in discovery",
			served: []string{"storagestates"},
			crds: map[string]*apiextensionsv1.CustomResourceDefinition{"storageversionmigrations": testCRD("storageversionmigrations",
				withCondition(apiextensionsv1.Established, apiextensionsv1.ConditionTrue, "InitialNamesAccepted", ""))},
			want: "wait: storageversionmigrations.migration.k8s.io is Established but not yet in discovery",
		},
		{
			name: "names held by another CRD",
			crds: map[string]*apiextensionsv1.CustomResourceDefinition{
				"storageversionmigrations": testCRD("storageversionmigrations",
					withCondition(apiextensionsv1.NamesAccepted, apiextensionsv1.ConditionFalse, "ShortNamesConflict", `"svmigration" is already in use`),
					withCondition(apiextensionsv1.Established, apiextensionsv1.ConditionFalse, "NotAccepted", "not all names are accepted")),
				"storagestates": testCRD("storagestates"),
			},
			want: `wait: storageversionmigrations.migration.k8s.io is not Established: its names are not accepted (ShortNamesConflict: "svmigration" is already in use)`,
		},
		{
			name:   "being deleted",
			served: []string{"storageversionmigrations"},
			crds: map[string]*apiextensionsv1.CustomResourceDefinition{"storagestates": testCRD("storagestates", func(c *apiextensionsv1.CustomResourceDefinition) {
				c.DeletionTimestamp = &metav1.Time{}
			})},
			want: "wait: storagestates.migration.k8s.io is being deleted",
		},
	})
}

func TestNotServedInTime(t *testing.T) {
	pending := []string{"storagestates.migration.k8s.io is not Established: its names are not accepted (ShortNamesConflict: \"svmstate\" is already in use)"}
	tests := []struct {
		name    string
		lastErr error
		want    string
	}{
		{
			name: "what is missing and where to look",
			want: `svm's CRDs exist but were not served within 2m0s: storagestates.migration.k8s.io is not Established: its names are not accepted (ShortNamesConflict: "svmstate" is already in use); ` +
				"see their status.conditions (kubectl get crd storageversionmigrations.migration.k8s.io storagestates.migration.k8s.io -o yaml)",
		},
		{
			name:    "and the last error, when the last read failed",
			lastErr: errors.New("connection refused"),
			want:    "-o yaml); last error: connection refused",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := notServedInTime(crdWait, pending, tt.lastErr)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line with %q", err, tt.want)
			}
		})
	}
}
