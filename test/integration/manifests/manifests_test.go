// Package manifests_test renders svm's install manifests with kustomize (as
// kubectl does) and has the real API server validate and admit every object
// with a server-side dry run, so what `kubectl apply -k config/default`
// installs is known to be accepted, least-privileged and runnable under the
// restricted Pod Security Standard.
package manifests_test

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// render runs `kubectl kustomize dir` and splits the result into objects.
func render(t *testing.T, env *framework.Env, dir string) (raw []byte, objs []*unstructured.Unstructured) {
	t.Helper()
	out, stderr, err := env.Kubectl(t, nil, "kustomize", framework.RepoRoot()+"/"+dir)
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode rendered %s: %v", dir, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return []byte(out), objs
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, into any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
				t.Fatalf("convert %s %s: %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("rendered manifests have no %s %s", kind, name)
}

func TestDefaultManifests(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	raw, objs := render(t, env, "config/default")

	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	for _, want := range []string{"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
		"Role", "RoleBinding", "Deployment", "PodDisruptionBudget", "Service", "FlowSchema", "PriorityLevelConfiguration"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("config/default renders no %s (has %v)", want, kinds)
		}
	}

	// Least privilege: nothing is bound to a built-in superuser role, and
	// the only wildcard is list, watch, update and patch on every resource, which
	// rewriting arbitrary resources needs.
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(b.RoleRef.Name, "system:") || slices.Contains([]string{"cluster-admin", "admin", "edit"}, b.RoleRef.Name) {
				t.Errorf("%s %s binds the built-in role %s", o.GetKind(), o.GetName(), b.RoleRef.Name)
			}
		case "ClusterRole", "Role":
			var r rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				t.Fatal(err)
			}
			for _, rule := range r.Rules {
				wild := slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*")
				if slices.Contains(rule.Verbs, "*") || wild && !slices.Equal(slices.Sorted(slices.Values(rule.Verbs)), []string{"list", "patch", "update", "watch"}) {
					t.Errorf("%s %s has a wildcard rule beyond list, watch and patch: %+v", o.GetKind(), o.GetName(), rule)
				}
			}
		}
	}

	var dep appsv1.Deployment
	find(t, objs, "Deployment", "svm-controller", &dep)
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("Deployment replicas = %v, want 2", dep.Spec.Replicas)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--leader-elect") {
		t.Errorf("controller args %v lack --leader-elect", c.Args)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Error("controller has no liveness or readiness probe")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("controller resources %+v lack CPU and memory requests or a memory limit", c.Resources)
	}
	checkFlags(t, c.Args)

	// The FlowSchema must name the ServiceAccount the Deployment runs as,
	// or svm's traffic silently stays at the default priority.
	// The leader election lease's schema must come first: the migration's
	// matches every update of svm's, lease renewals included.
	var lease flowcontrolv1.FlowSchema
	find(t, objs, "FlowSchema", "svm-leader-election", &lease)
	for _, name := range []string{"svm-migration", "svm-leader-election"} {
		var fs flowcontrolv1.FlowSchema
		find(t, objs, "FlowSchema", name, &fs)
		if subj := fs.Spec.Rules[0].Subjects[0].ServiceAccount; subj == nil || subj.Name != dep.Spec.Template.Spec.ServiceAccountName || subj.Namespace != dep.Namespace {
			t.Errorf("FlowSchema %s subject %+v is not the ServiceAccount the Deployment runs as, %s/%s", name, fs.Spec.Rules[0].Subjects[0], dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName)
		}
		if name == "svm-migration" && fs.Spec.MatchingPrecedence <= lease.Spec.MatchingPrecedence {
			t.Errorf("FlowSchema svm-migration (precedence %d) matches before svm-leader-election (%d): svm's lease renewals would wait behind its migration", fs.Spec.MatchingPrecedence, lease.Spec.MatchingPrecedence)
		}
	}
	var pdb policyv1.PodDisruptionBudget
	find(t, objs, "PodDisruptionBudget", "svm-controller", &pdb)
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("PodDisruptionBudget selector %v does not select the controller's pods (%v)", pdb.Spec.Selector, err)
	}

	// The real API server validates and admits every object. Namespaced
	// objects need their namespace to exist, which a dry run does not
	// create, so the namespace is created for real first, as rendered.
	var ns corev1.Namespace
	find(t, objs, "Namespace", "svm-system", &ns)
	if _, err := env.Kube.CoreV1().Namespaces().Create(framework.Context(t, time.Minute), &ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	out, stderr, err := env.Kubectl(t, raw, "apply", "--server-side", "--dry-run=server", "--field-manager=svm-install", "-f", "-")
	if err != nil {
		t.Fatalf("server-side dry run of config/default: %v\n%s", err, stderr)
	}
	if strings.Contains(stderr, "Warning") {
		t.Errorf("server-side dry run of config/default warned:\n%s", stderr)
	}
	if got, want := strings.Count(out, "serverside-applied (server dry run)"), len(objs); got != want {
		t.Errorf("dry run applied %d objects, want %d:\n%s", got, want, out)
	}

	// The namespace enforces the restricted Pod Security Standard; the
	// controller's pod must be admitted there, and the same pod without its
	// security context must not (so the check can fail). Admitting a pod
	// needs its ServiceAccount, created as rendered.
	var sa corev1.ServiceAccount
	find(t, objs, "ServiceAccount", dep.Spec.Template.Spec.ServiceAccountName, &sa)
	if _, err := env.Kube.CoreV1().ServiceAccounts(sa.Namespace).Create(framework.Context(t, time.Minute), &sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service account: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "svm-controller-check", Namespace: ns.Name, Labels: dep.Spec.Template.Labels},
		Spec:       dep.Spec.Template.Spec,
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	ctx := framework.Context(t, time.Minute)
	if _, err := env.Kube.CoreV1().Pods(ns.Name).Create(ctx, pod, dryRun); err != nil {
		t.Errorf("the controller's pod is not admitted under the restricted Pod Security Standard: %v", err)
	}
	bare := pod.DeepCopy()
	bare.Spec.SecurityContext = nil
	bare.Spec.Containers[0].SecurityContext = nil
	_, err = env.Kube.CoreV1().Pods(ns.Name).Create(ctx, bare, dryRun)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
		t.Errorf("a pod without security context was not refused by Pod Security admission: %v", err)
	}
}

// TestPrometheusManifests dry-runs the optional ServiceMonitor. The
// Prometheus Operator's CRD is not part of this control plane, so a
// stand-in CRD of the same group, version and kind (schema left open) is
// installed; the dry run then checks the object's identity and namespace,
// and that it selects the metrics Service of config/default.
func TestPrometheusManifests(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	_, defaults := render(t, env, "config/default")
	raw, objs := render(t, env, "config/prometheus")

	var svc corev1.Service
	find(t, defaults, "Service", "svm-controller-metrics", &svc)
	var sm struct {
		Spec struct {
			Selector  metav1.LabelSelector `json:"selector"`
			Endpoints []struct {
				Port string `json:"port"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	find(t, objs, "ServiceMonitor", "svm-controller", &sm)
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not select Service %s (labels %v)", sm.Spec.Selector, svc.Name, svc.Labels)
	}
	if len(sm.Spec.Endpoints) == 0 || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == sm.Spec.Endpoints[0].Port }) {
		t.Errorf("ServiceMonitor endpoints %v name no port of Service %s", sm.Spec.Endpoints, svc.Name)
	}

	env.InstallCRDs(t, framework.RepoRoot()+"/test/integration/manifests/testdata")
	env.CreateNamespace(t, "svm-system")
	out, stderr, err := env.Kubectl(t, raw, "apply", "--server-side", "--dry-run=server", "-f", "-")
	if err != nil || !strings.Contains(out, "servicemonitor.monitoring.coreos.com/svm-controller serverside-applied") {
		t.Fatalf("server-side dry run of config/prometheus: %v\n%s%s", err, out, stderr)
	}
}

// checkFlags fails when the Deployment passes a flag `svm controller` does
// not know, which would crash-loop every replica.
func checkFlags(t *testing.T, args []string) {
	t.Helper()
	help, err := exec.Command(framework.SVMBinary(t), "controller", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("svm controller --help: %v\n%s", err, help)
	}
	for _, a := range args[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !bytes.Contains(help, []byte("--"+name+" ")) && !bytes.Contains(help, []byte("--"+name+"\n")) {
			t.Errorf("the Deployment passes %s, which svm controller does not accept", a)
		}
	}
}
