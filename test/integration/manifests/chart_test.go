package manifests_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// objectKey names an object as kubectl apply and Helm do.
type objectKey struct{ Kind, Namespace, Name string }

func keyOf(o *unstructured.Unstructured) objectKey {
	return objectKey{o.GetKind(), o.GetNamespace(), o.GetName()}
}

func keysOf(objs []*unstructured.Unstructured) []objectKey {
	keys := make([]objectKey, 0, len(objs))
	for _, o := range objs {
		keys = append(keys, keyOf(o))
	}
	slices.SortFunc(keys, func(a, b objectKey) int {
		return strings.Compare(a.Kind+"/"+a.Namespace+"/"+a.Name, b.Kind+"/"+b.Namespace+"/"+b.Name)
	})
	return keys
}

// renderChart runs `helm template` on charts/svm with the CRDs, which
// `helm install` installs first, in namespace (none: Helm's default).
func renderChart(t *testing.T, namespace string, args ...string) (string, error) {
	t.Helper()
	args = append([]string{"template", "svm", "charts/svm", "--include-crds"}, args...)
	if namespace != "" {
		args = append(args, "--namespace", namespace)
	}
	out, stderr, err := framework.RunHelm(t, args...)
	if err != nil {
		return "", fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr)
	}
	return out, nil
}

func kustomize(t *testing.T, env *framework.Env, dirs ...string) (string, []*unstructured.Unstructured) {
	t.Helper()
	var all []string
	for _, dir := range dirs {
		raw, _ := render(t, env, dir)
		all = append(all, string(raw))
	}
	manifests := strings.Join(all, "\n---\n")
	return manifests, framework.DecodeManifests(t, strings.Join(dirs, " + "), manifests)
}

// sameObjects fails unless every object of config/ is in the chart with the
// same contents; the chart may add labels (Helm's), nothing else.
func sameObjects(t *testing.T, kustomized, charted []*unstructured.Unstructured) {
	t.Helper()
	if diff := cmp.Diff(keysOf(kustomized), keysOf(charted)); diff != "" {
		t.Errorf("the chart and config/ install different objects (-kustomize +chart):\n%s", diff)
	}
	inChart := map[objectKey]*unstructured.Unstructured{}
	for _, o := range charted {
		inChart[keyOf(o)] = o
	}
	for _, want := range kustomized {
		got, ok := inChart[keyOf(want)]
		if !ok {
			continue
		}
		for k, v := range want.GetLabels() {
			if got.GetLabels()[k] != v {
				t.Errorf("%v: the chart's labels %v lack %s=%s", keyOf(want), got.GetLabels(), k, v)
			}
		}
		want, got = want.DeepCopy(), got.DeepCopy()
		want.SetLabels(nil)
		got.SetLabels(nil)
		if diff := cmp.Diff(want.Object, got.Object); diff != "" {
			t.Errorf("%v differs between config/ and the chart (-kustomize +chart):\n%s", keyOf(want), diff)
		}
	}
}

// dryRun has the API server validate (strictly: unknown fields are errors)
// and admit every object of manifests without persisting any.
func dryRun(t *testing.T, env *framework.Env, what, manifests string, objects int) {
	t.Helper()
	out, stderr, err := env.Kubectl(t, []byte(manifests), "apply", "--server-side", "--dry-run=server", "--field-manager=svm-install", "-f", "-")
	if err != nil {
		t.Fatalf("server-side dry run of %s: %v\n%s", what, err, stderr)
	}
	if strings.Contains(stderr, "Warning") {
		t.Errorf("server-side dry run of %s warned:\n%s", what, stderr)
	}
	if got := strings.Count(out, "serverside-applied (server dry run)"); got != objects {
		t.Errorf("dry run of %s applied %d objects, want %d:\n%s", what, got, objects, out)
	}
}

func deploymentOf(t *testing.T, objs []*unstructured.Unstructured) (appsv1.Deployment, corev1.Container) {
	t.Helper()
	var dep appsv1.Deployment
	find(t, objs, "Deployment", "svm-controller", &dep)
	if len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", len(dep.Spec.Template.Spec.Containers))
	}
	return dep, dep.Spec.Template.Spec.Containers[0]
}

func hasKind(objs []*unstructured.Unstructured, kind string) bool {
	return slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind })
}

// TestChart checks that charts/svm installs what config/ installs: with
// default values the same objects as config/default (and with
// serviceMonitor.enabled, config/default and config/prometheus), object
// for object, all accepted by the real API server; that its values change
// what they name, and only into objects the API server accepts; and that
// the README's `helm install` works.
func TestChart(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	// Namespaced objects need their namespace, which a dry run does not
	// create: it is created for real, as the chart renders it. The
	// ServiceMonitor CRD is a stand-in (see testdata).
	defaults, err := renderChart(t, "svm-system")
	if err != nil {
		t.Fatal(err)
	}
	var ns corev1.Namespace
	find(t, framework.DecodeManifests(t, "the chart", defaults), "Namespace", "svm-system", &ns)
	if _, err := env.Kube.CoreV1().Namespaces().Create(framework.Context(t, time.Minute), &ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	env.InstallCRDs(t, framework.RepoRoot()+"/test/integration/manifests/testdata")

	t.Run("same objects as kustomize", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			set  []string
			dirs []string
		}{
			{name: "defaults", dirs: []string{"config/default"}},
			{name: "serviceMonitor.enabled", set: []string{"--set", "serviceMonitor.enabled=true"}, dirs: []string{"config/default", "config/prometheus"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				kustomized, kobjs := kustomize(t, env, tc.dirs...)
				charted, err := renderChart(t, "svm-system", tc.set...)
				if err != nil {
					t.Fatal(err)
				}
				cobjs := framework.DecodeManifests(t, "the chart", charted)
				sameObjects(t, kobjs, cobjs)
				dryRun(t, env, strings.Join(tc.dirs, " + "), kustomized, len(kobjs))
				dryRun(t, env, "the chart", charted, len(cobjs))
			})
		}
	})
	t.Run("lint", func(t *testing.T) {
		if out, stderr, err := framework.RunHelm(t, "lint", "--strict", "charts/svm", "--namespace", "svm-system"); err != nil {
			t.Errorf("helm lint --strict: %v\n%s%s", err, out, stderr)
		}
	})
	t.Run("values", func(t *testing.T) { chartValues(t, env) })
	t.Run("values refused", chartValuesRefused)
	t.Run("helm install", func(t *testing.T) { helmInstall(t, env) })
}

func chartValues(t *testing.T, env *framework.Env) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name   string
		args   []string
		values string // a values file, passed with -f
		check  func(t *testing.T, objs []*unstructured.Unstructured)
	}{{
		name: "replicas",
		args: []string{"--set", "replicas=3"},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if dep, _ := deploymentOf(t, objs); dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
				t.Errorf("replicas = %v, want 3", dep.Spec.Replicas)
			}
		},
	}, {
		name: "image tag",
		args: []string{"--set", "image.tag=v1.2.3"},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if _, c := deploymentOf(t, objs); c.Image != "svm:v1.2.3" {
				t.Errorf("image = %q, want svm:v1.2.3", c.Image)
			}
		},
	}, {
		name: "image digest",
		args: []string{"--set", "image.repository=registry.example/svm,image.tag=v1.2.3,image.digest=" + digest + ",image.pullPolicy=IfNotPresent"},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			_, c := deploymentOf(t, objs)
			if want := "registry.example/svm@" + digest; c.Image != want || c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("image = %q pulled %q, want %q pulled IfNotPresent", c.Image, c.ImagePullPolicy, want)
			}
		},
	}, {
		name:   "extraArgs",
		values: "controller:\n  extraArgs: [--trigger-interval=5m, --chunk-size=250]\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			_, c := deploymentOf(t, objs)
			if got := c.Args[len(c.Args)-2:]; !slices.Equal(got, []string{"--trigger-interval=5m", "--chunk-size=250"}) {
				t.Errorf("args %v do not end with the extra args", c.Args)
			}
			checkFlags(t, c.Args)
		},
	}, {
		name: "controller flags",
		values: `replicas: 1
controller:
  leaderElect: false
  encryptedResources: [secrets, configmaps]
  apiserverEndpoints: ["https://apiserver-1.example:6443", "https://apiserver-2.example:6443"]
  maxParallel: 4
  workers: 16
  qps: 50.5
  executor: svm
  throughStatus: true
`,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			_, c := deploymentOf(t, objs)
			want := []string{"controller", "--leader-elect=false", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081",
				"--encrypted-resources=secrets,configmaps", "--apiserver-endpoints=https://apiserver-1.example:6443,https://apiserver-2.example:6443",
				"--max-parallel=4", "--workers=16", "--qps=50.5", "--executor=svm", "--through-status"}
			if diff := cmp.Diff(want, c.Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			checkFlags(t, c.Args)
		},
	}, {
		name: "re-encryption off",
		args: []string{"--set-json", "controller.encryptedResources=[]"},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if _, c := deploymentOf(t, objs); !slices.Contains(c.Args, "--encrypted-resources=") {
				t.Errorf("args %v do not turn re-encryption off", c.Args)
			}
		},
	}, {
		name:   "resources",
		values: "resources:\n  requests: {cpu: 200m, memory: 128Mi}\n  limits: {memory: 1Gi}\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			_, c := deploymentOf(t, objs)
			want := corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
			}
			if !equality.Semantic.DeepEqual(want, c.Resources) {
				t.Errorf("resources = %v, want %v", c.Resources, want)
			}
		},
	}, {
		name: "scheduling",
		values: `nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: control-plane, effect: NoSchedule}]
priorityClassName: system-cluster-critical
podAnnotations: {example.com/team: storage}
imagePullSecrets: [{name: registry}]
`,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			dep, _ := deploymentOf(t, objs)
			pod := dep.Spec.Template
			if pod.Spec.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Key != "dedicated" ||
				pod.Spec.PriorityClassName != "system-cluster-critical" || pod.Annotations["example.com/team"] != "storage" ||
				len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "registry" {
				t.Errorf("the pod template does not carry the scheduling values: %+v", pod)
			}
		},
	}, {
		name: "apf off",
		args: []string{"--set", "apf.enabled=false"},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if hasKind(objs, "FlowSchema") || hasKind(objs, "PriorityLevelConfiguration") {
				t.Errorf("apf.enabled=false still renders API Priority and Fairness objects: %v", keysOf(objs))
			}
		},
	}, {
		name: "apf shares",
		args: []string{"--set", "apf.nominalConcurrencyShares=30"},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			var plc flowcontrolv1.PriorityLevelConfiguration
			find(t, objs, "PriorityLevelConfiguration", "svm-migration", &plc)
			if s := plc.Spec.Limited.NominalConcurrencyShares; s == nil || *s != 30 {
				t.Errorf("nominalConcurrencyShares = %v, want 30", s)
			}
		},
	}, {
		name: "namespace managed elsewhere",
		args: []string{"--set", "namespace.create=false"},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if hasKind(objs, "Namespace") {
				t.Errorf("namespace.create=false still renders a Namespace")
			}
			if dep, _ := deploymentOf(t, objs); dep.Namespace != "svm-system" {
				t.Errorf("the Deployment is in %q, want the release namespace svm-system", dep.Namespace)
			}
		},
	}, {
		// The opt-in role for writes through the status subresource is
		// config/rbac/cli's, bound to svm's ServiceAccount; off, neither
		// is rendered.
		name: "rbac.statusWriter",
		args: []string{"--set", "rbac.statusWriter=true"},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			var role, shipped rbacv1.ClusterRole
			find(t, objs, "ClusterRole", "svm-status-writer", &role)
			find(t, framework.DecodeManifests(t, "config/rbac/cli", string(readRepoFile(t, "config/rbac/cli/status_writer_role.yaml"))), "ClusterRole", "svm-status-writer", &shipped)
			if diff := cmp.Diff(shipped.Rules, role.Rules); diff != "" {
				t.Errorf("the chart's svm-status-writer rules differ from config/rbac/cli's (-config +chart):\n%s", diff)
			}
			var binding rbacv1.ClusterRoleBinding
			find(t, objs, "ClusterRoleBinding", "svm-status-writer", &binding)
			want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "svm-controller", Namespace: "svm-system"}}
			if binding.RoleRef.Name != "svm-status-writer" || !slices.Equal(binding.Subjects, want) {
				t.Errorf("the svm-status-writer binding binds %s to %+v, want svm-status-writer to %+v", binding.RoleRef.Name, binding.Subjects, want)
			}
			defaults, err := renderChart(t, "svm-system")
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range framework.DecodeManifests(t, "the chart", defaults) {
				if o.GetName() == "svm-status-writer" {
					t.Errorf("the chart renders %s svm-status-writer without rbac.statusWriter", o.GetKind())
				}
			}
		},
	}, {
		name:   "serviceMonitor labels",
		values: "serviceMonitor:\n  enabled: true\n  interval: 1m\n  labels: {release: prometheus}\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			var sm struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
				Spec     struct {
					Endpoints []struct {
						Interval string `json:"interval"`
					} `json:"endpoints"`
				} `json:"spec"`
			}
			find(t, objs, "ServiceMonitor", "svm-controller", &sm)
			if sm.Metadata.Labels["release"] != "prometheus" || sm.Metadata.Labels["app.kubernetes.io/component"] != "controller" ||
				len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Interval != "1m" {
				t.Errorf("ServiceMonitor labels %v, endpoints %+v: want release=prometheus and interval 1m", sm.Metadata.Labels, sm.Spec.Endpoints)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.values != "" {
				file := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(file, []byte(tc.values), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, "-f", file)
			}
			out, err := renderChart(t, "svm-system", args...)
			if err != nil {
				t.Fatal(err)
			}
			objs := framework.DecodeManifests(t, "the chart", out)
			tc.check(t, objs)
			dryRun(t, env, "the chart with "+tc.name, out, len(objs))
		})
	}
}

// chartValuesRefused: values that would install something broken or
// harmful fail at render time, saying why.
func chartValuesRefused(t *testing.T) {
	for _, tc := range []struct {
		name      string
		namespace string
		args      []string
		want      string
	}{
		{name: "two replicas without leader election", namespace: "svm-system", args: []string{"--set", "controller.leaderElect=false"}, want: "every replica would migrate"},
		{name: "Helm's default namespace", want: `label namespace "default"`},
		{name: "kube-system", namespace: "kube-system", want: `label namespace "kube-system"`},
		{name: "a misspelled value", namespace: "svm-system", args: []string{"--set", "replica=3"}, want: "additional properties 'replica' not allowed"},
		{name: "a flag without dashes", namespace: "svm-system", args: []string{"--set-json", `controller.extraArgs=["qps=5"]`}, want: "'qps=5' does not match pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := renderChart(t, tc.namespace, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template succeeded or failed for another reason (want %q): %v\n%s", tc.want, err, out)
			}
		})
	}
	// The same namespace rule lets an install into a namespace managed
	// elsewhere through, so the refusal above is the rule's and not a
	// broken chart's.
	if _, err := renderChart(t, "", "--set", "namespace.create=false"); err != nil {
		t.Errorf("namespace.create=false in Helm's default namespace: %v", err)
	}
}

// helmInstall runs the README's `helm install` for real, into a namespace
// the chart has not been rendered into before, so that every reference to
// the release namespace is seen to follow it; then an upgrade.
func helmInstall(t *testing.T, env *framework.Env) {
	const ns = "svm-helm"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.CP.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := framework.RunHelm(t, "install", "svm", "charts/svm", "-n", ns, "--create-namespace", "--kubeconfig", kubeconfig); err != nil {
		t.Fatalf("helm install: %v\n%s%s", err, out, stderr)
	}
	ctx := framework.Context(t, time.Minute)

	// --create-namespace made the namespace; the chart's Namespace then made
	// it enforce the restricted Pod Security Standard.
	if got, err := env.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Errorf("namespace %s: %v", ns, err)
	} else if got.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace %s has labels %v: want it to enforce the restricted standard", ns, got.Labels)
	}
	for _, name := range []string{"storageversionmigrations.migration.k8s.io", "storagestates.migration.k8s.io"} {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
			t.Errorf("CRD %s from crds/ not installed: %v", name, err)
		}
	}
	if replicas := deployedReplicas(t, env, ns); replicas != 2 {
		t.Errorf("the Deployment has %d replicas, want 2", replicas)
	}
	// Every reference to svm's ServiceAccount names the release namespace.
	var subjects []string
	for _, name := range []string{"svm-migration", "svm-leader-election"} {
		if fs, err := env.Kube.FlowcontrolV1().FlowSchemas().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("FlowSchema %s: %v", name, err)
		} else if sa := fs.Spec.Rules[0].Subjects[0].ServiceAccount; sa != nil {
			subjects = append(subjects, "FlowSchema "+name+": "+sa.Namespace+"/"+sa.Name)
		}
	}
	if crb, err := env.Kube.RbacV1().ClusterRoleBindings().Get(ctx, "svm-controller", metav1.GetOptions{}); err != nil {
		t.Errorf("ClusterRoleBinding svm-controller: %v", err)
	} else {
		for _, s := range crb.Subjects {
			subjects = append(subjects, "ClusterRoleBinding svm-controller: "+s.Namespace+"/"+s.Name)
		}
	}
	for _, b := range []struct{ namespace, name string }{{ns, "svm-leader-election"}, {"kube-system", "svm-controller"}} {
		rb, err := env.Kube.RbacV1().RoleBindings(b.namespace).Get(ctx, b.name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("RoleBinding %s/%s: %v", b.namespace, b.name, err)
			continue
		}
		for _, s := range rb.Subjects {
			subjects = append(subjects, "RoleBinding "+b.namespace+"/"+b.name+": "+s.Namespace+"/"+s.Name)
		}
	}
	want := []string{
		"FlowSchema svm-migration: svm-helm/svm-controller",
		"FlowSchema svm-leader-election: svm-helm/svm-controller",
		"ClusterRoleBinding svm-controller: svm-helm/svm-controller",
		"RoleBinding svm-helm/svm-leader-election: svm-helm/svm-controller",
		"RoleBinding kube-system/svm-controller: svm-helm/svm-controller",
	}
	if diff := cmp.Diff(want, subjects); diff != "" {
		t.Errorf("subjects (-want +got):\n%s", diff)
	}
	// Helm keeps its release record in the release namespace, which the
	// chart's Namespace must have left in place.
	records, err := env.Kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=svm"})
	if err != nil {
		t.Errorf("list helm's release records in %s: %v", ns, err)
	} else if len(records.Items) != 1 {
		t.Errorf("%d release records of svm in %s, want 1", len(records.Items), ns)
	}

	if out, stderr, err := framework.RunHelm(t, "upgrade", "svm", "charts/svm", "-n", ns, "--reuse-values", "--set", "replicas=3", "--kubeconfig", kubeconfig); err != nil {
		t.Fatalf("helm upgrade: %v\n%s%s", err, out, stderr)
	}
	if replicas := deployedReplicas(t, env, ns); replicas != 3 {
		t.Errorf("after helm upgrade --set replicas=3, the Deployment has %d replicas, want 3", replicas)
	}
}

func deployedReplicas(t *testing.T, env *framework.Env, ns string) int32 {
	t.Helper()
	dep, err := env.Kube.AppsV1().Deployments(ns).Get(framework.Context(t, time.Minute), "svm-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Deployment %s/svm-controller: %v", ns, err)
	}
	if dep.Spec.Replicas == nil {
		return 1
	}
	return *dep.Spec.Replicas
}

// readRepoFile reads a file of the repository, by its path from the root.
func readRepoFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
