package manager

// svm controller's checks before it starts: where its leader election lease
// lives, whether its CRDs are served (waiting while they are being set up),
// and whether it may list its own migrations and the in-tree ones it
// watches. Each failure is one line that names what to do, instead of an
// error the manager would retry and log forever.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1client "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/crdversions"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/kubeclients"
)

// podNamespaceFile is where a pod's service account mount names the pod's
// namespace; controller-runtime takes the lease's namespace from it.
const podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// namespacedLock is the leader election lock and the namespace of its lease.
type namespacedLock struct {
	resourcelock.Interface
	namespace string
}

// electionLock chooses the lease's namespace (see chooseLeaseNamespace) and
// builds the lock. It reads the lease once, because the elector would meet
// a lease it may not read, or a namespace that does not exist, every two
// seconds and only log it, forever; svm says so once and stops instead.
// The line naming the lease is logged only once these checks pass, so that
// a refusal stays a one-line answer.
func (o *Config) electionLock(ctx context.Context) (namespacedLock, error) {
	clients := o.Clients
	in := readLeaseNamespaceInputs(o.LeaderElectionNamespace, o.ConfigFlags, podNamespaceFile)
	ns, why, err := chooseLeaseNamespace(in)
	if err != nil {
		return namespacedLock{}, fmt.Errorf("leader election: %w", err)
	}
	lock, err := leaseLock(clients.Config, ns)
	if err != nil {
		return namespacedLock{}, err
	}
	hint := why
	if in.Flag == "" {
		hint += "; --leader-election-namespace chooses another"
	}
	_, _, err = lock.Get(ctx)
	switch {
	case apierrors.IsForbidden(err):
		return namespacedLock{}, fmt.Errorf("leader election: %w; svm controller needs the Role svm-leader-election (config/rbac) bound to this user in namespace %s, where its lease lives (%s)", err, ns, hint)
	case apierrors.IsNotFound(err) && !in.InPod && namespaceMissing(ctx, clients.Kube, ns):
		// A pod's own namespace exists; one taken from a kubeconfig may not.
		return namespacedLock{}, fmt.Errorf("leader election: namespace %q does not exist (%s): create it, or choose another with --leader-election-namespace", ns, why)
	}
	klog.InfoS("Leader election lease", "lease", klog.KRef(ns, leaderElectionID), "why", why)
	return namespacedLock{Interface: lock, namespace: ns}, nil
}

// namespaceMissing tells whether namespace certainly does not exist. It
// lists by name, which svm's ClusterRole allows for every resource; when it
// cannot tell, the elector will report what it meets.
func namespaceMissing(ctx context.Context, kube kubernetes.Interface, namespace string) bool {
	list, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", namespace).String()})
	return err == nil && len(list.Items) == 0
}

// leaseNamespaceInputs is everything the lease's namespace may come from.
type leaseNamespaceInputs struct {
	// Flag is --leader-election-namespace.
	Flag string
	// InPod says that the service account mount names the pod's namespace:
	// svm runs in a pod. PodNamespace is that name, PodErr why it could not
	// be read.
	InPod        bool
	PodNamespace string
	PodErr       error
	// Kubectl is the namespace kubectl would use, KubectlFromFlag whether
	// --namespace set it, and KubectlErr why the kubeconfig could not tell.
	Kubectl         string
	KubectlFromFlag bool
	KubectlErr      error
	// Context is the kubeconfig context in use and ContextNamespace the
	// namespace it names, if any; they only explain the choice.
	Context          string
	ContextNamespace string
}

// chooseLeaseNamespace decides where the leader election lease lives, and
// says why: --leader-election-namespace when given; in a pod, the pod's
// namespace, as controller-runtime chooses (the Deployment's RBAC grants
// the lease there); elsewhere, as on a workstation, the namespace kubectl
// would use with the same flags and kubeconfig (--namespace, else the
// context's, else default), so that the lease is where the operator's
// other work goes. Any failure names --leader-election-namespace.
func chooseLeaseNamespace(in leaseNamespaceInputs) (namespace, why string, err error) {
	const hint = "set --leader-election-namespace"
	switch {
	case in.Flag != "":
		return in.Flag, "set by --leader-election-namespace", nil
	case in.InPod && in.PodErr != nil:
		return "", "", fmt.Errorf("cannot read the pod's namespace: %w; %s", in.PodErr, hint)
	case in.InPod && in.PodNamespace == "":
		return "", "", fmt.Errorf("the pod's namespace file %s is empty; %s", podNamespaceFile, hint)
	case in.InPod:
		return in.PodNamespace, "the pod's namespace", nil
	case in.KubectlErr != nil:
		return "", "", fmt.Errorf("cannot tell the kubeconfig context's namespace: %w; %s", in.KubectlErr, hint)
	case in.Kubectl == "":
		return "", "", fmt.Errorf("no namespace for the lease, outside a pod and with none in the kubeconfig; %s", hint)
	case in.KubectlFromFlag:
		return in.Kubectl, "set by --namespace", nil
	case in.ContextNamespace == in.Kubectl:
		return in.Kubectl, fmt.Sprintf("the namespace of kubeconfig context %q", in.Context), nil
	case in.ContextNamespace == "" && in.Kubectl == metav1.NamespaceDefault:
		return in.Kubectl, fmt.Sprintf("kubeconfig context %q names no namespace: default, as for kubectl", in.Context), nil
	default:
		return in.Kubectl, fmt.Sprintf("kubectl's namespace for kubeconfig context %q", in.Context), nil
	}
}

// readLeaseNamespaceInputs reads what chooseLeaseNamespace decides from:
// flag, the pod's namespace file at podFile, and the kubeconfig and
// --namespace and --context of flags, through kubectl's own loader.
func readLeaseNamespaceInputs(flag string, flags *genericclioptions.ConfigFlags, podFile string) leaseNamespaceInputs {
	in := leaseNamespaceInputs{Flag: flag}
	if flag != "" {
		return in
	}
	data, err := os.ReadFile(podFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		in.InPod, in.PodErr = true, err
	default:
		in.InPod, in.PodNamespace = true, string(data)
	}
	if in.InPod {
		return in
	}
	loader := flags.ToRawKubeConfigLoader()
	in.Kubectl, in.KubectlFromFlag, in.KubectlErr = loader.Namespace()
	if raw, err := loader.RawConfig(); err == nil {
		in.Context = raw.CurrentContext
		if flags.Context != nil && *flags.Context != "" {
			in.Context = *flags.Context
		}
		if c := raw.Contexts[in.Context]; c != nil {
			in.ContextNamespace = c.Namespace
		}
	}
	return in
}

// svmCRDResources are the resources svm's CRDs serve, in
// migrationv1alpha1.GroupVersion.
var svmCRDResources = []string{"storageversionmigrations", "storagestates"}

// crdWait bounds how long svm controller waits for CRDs that exist but are
// not served yet. After `kubectl apply` that takes a second or so (more in
// a highly available control plane, where every API server must see the
// CRD first); two minutes is ample, and still ends a start that cannot
// succeed, such as a CRD whose names another CRD holds, with a message
// rather than a hang. In a pod, a restart waits again.
const crdWait = 2 * time.Minute

// crdPoll is how often the CRDs and discovery are read while waiting.
const crdPoll = 500 * time.Millisecond

// requireCRDs returns once the server serves svm's CRDs. When they are not
// installed it fails at once with a plain message, rather than with the
// discovery error the manager would give. When they exist but are not
// served yet (just applied: not Established, or not yet in discovery) it
// says so in one line and waits, up to crdWait.
func requireCRDs(ctx context.Context, clients *kubeclients.Set) error {
	r := crdReader{disc: clients.Discovery, crds: clients.CRDs.ApiextensionsV1().CustomResourceDefinitions()}
	v, err := r.read(ctx)
	switch {
	case err != nil:
		return err
	case v.fail != nil:
		return v.fail
	case v.ready:
		return nil
	}
	klog.InfoS("Waiting for svm's CRDs to be established and served", "pending", strings.Join(v.pending, "; "), "timeout", crdWait)
	var lastErr error
	_ = wait.PollUntilContextTimeout(ctx, crdPoll, crdWait, false, func(ctx context.Context) (bool, error) {
		next, err := r.read(ctx)
		if err != nil {
			if ctx.Err() == nil { // not merely cut short by the deadline
				lastErr = err // perhaps passing: read again
			}
			return false, nil
		}
		v, lastErr = next, nil
		return v.ready || v.fail != nil, nil
	})
	switch {
	case v.fail != nil:
		return v.fail
	case v.ready:
		klog.InfoS("svm's CRDs are served")
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return notServedInTime(crdWait, v.pending, lastErr)
}

// notServedInTime is requireCRDs' answer when the CRDs it waited for were
// still not served after wait: what is still missing, and where to look.
func notServedInTime(wait time.Duration, pending []string, lastErr error) error {
	names := make([]string, len(svmCRDResources))
	for i, res := range svmCRDResources {
		names[i] = res + "." + migrationv1alpha1.GroupVersion.Group
	}
	msg := fmt.Sprintf("svm's CRDs exist but were not served within %s: %s; see their status.conditions (kubectl get crd %s -o yaml)",
		wait, strings.Join(pending, "; "), strings.Join(names, " "))
	if lastErr != nil {
		msg += fmt.Sprintf("; last error: %v", lastErr)
	}
	return errors.New(msg)
}

// crdReader reads what crdReadiness decides from.
type crdReader struct {
	disc discovery.DiscoveryInterface
	crds apiextensionsv1client.CustomResourceDefinitionInterface
}

// read asks discovery what it serves of svm's API and, only when that is
// not everything, reads the CRDs of what is missing. It lists them by name,
// since svm's ClusterRole grants list on CRDs, not get. Where even list is
// forbidden it cannot tell a CRD that is not established from one that
// does not exist, and takes the missing as not installed.
func (r crdReader) read(ctx context.Context) (crdVerdict, error) {
	gv := migrationv1alpha1.GroupVersion
	var served []string
	list, err := r.disc.ServerResourcesForGroupVersion(gv.String())
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return crdVerdict{}, fmt.Errorf("discover %s: %w", gv, err)
	default:
		for _, res := range list.APIResources {
			served = append(served, res.Name)
		}
	}
	crds := map[string]*apiextensionsv1.CustomResourceDefinition{}
	listed := true
	for _, res := range svmCRDResources {
		if slices.Contains(served, res) {
			continue
		}
		name := res + "." + gv.Group
		found, err := r.crds.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if apierrors.IsForbidden(err) {
			listed = false
			break
		}
		if err != nil {
			return crdVerdict{}, fmt.Errorf("list CRD %s: %w", name, err)
		}
		if len(found.Items) > 0 {
			crds[res] = &found.Items[0]
		}
	}
	return crdReadiness(served, crds, listed), nil
}

// crdVerdict is what requireCRDs makes of svm's CRDs at one moment: ready;
// or fail, at once; or wait for the pending, each said with why.
type crdVerdict struct {
	ready   bool
	fail    error
	pending []string
}

// crdReadiness decides from the resources discovery serves in svm's group
// version and svm's CRDs as listed, by resource (absent when not found;
// listed is false when they could not be listed), whether svm controller
// may start, must wait, or cannot start. A CRD that does not exist will not
// appear by waiting, nor will a version it does not serve: fail at once. A
// CRD that exists but is not served is being set up: wait.
func crdReadiness(served []string, crds map[string]*apiextensionsv1.CustomResourceDefinition, listed bool) crdVerdict {
	gv := migrationv1alpha1.GroupVersion
	var missing, pending []string
	var fail error
	for _, res := range svmCRDResources {
		if slices.Contains(served, res) {
			continue
		}
		crd := crds[res]
		switch {
		case !listed || crd == nil:
			missing = append(missing, res)
		case !crdversions.Serves(crd, gv.Version):
			if fail == nil {
				fail = fmt.Errorf("CRD %s does not serve %s: install svm's CRDs (kubectl apply -k config/crd)", crd.Name, gv.Version)
			}
		default:
			pending = append(pending, notServedBecause(crd))
		}
	}
	switch {
	case len(missing) == len(svmCRDResources):
		return crdVerdict{fail: fmt.Errorf("the server does not serve %s: install svm's CRDs first (kubectl apply -k config/crd)", gv)}
	case len(missing) > 0:
		return crdVerdict{fail: fmt.Errorf("the server does not serve %s.%s: install svm's CRDs first (kubectl apply -k config/crd)", missing[0], gv.Group)}
	case fail != nil:
		return crdVerdict{fail: fail}
	case len(pending) > 0:
		return crdVerdict{pending: pending}
	}
	return crdVerdict{ready: true}
}

// notServedBecause says why the API server does not serve crd yet, from its
// conditions.
func notServedBecause(crd *apiextensionsv1.CustomResourceDefinition) string {
	established := apihelpers.FindCRDCondition(crd, apiextensionsv1.Established)
	names := apihelpers.FindCRDCondition(crd, apiextensionsv1.NamesAccepted)
	switch {
	case crd.DeletionTimestamp != nil:
		return crd.Name + " is being deleted"
	case established != nil && established.Status == apiextensionsv1.ConditionTrue:
		return crd.Name + " is Established but not yet in discovery"
	case names != nil && names.Status == apiextensionsv1.ConditionFalse:
		return fmt.Sprintf("%s is not Established: its names are not accepted (%s: %s)", crd.Name, names.Reason, names.Message)
	case established != nil && established.Message != "":
		return fmt.Sprintf("%s is not Established (%s: %s)", crd.Name, established.Reason, established.Message)
	}
	return crd.Name + " is not Established"
}

// requireAccess fails with the API server's own words, and the role to
// bind, when svm may not list one of gvrs: the manager's cache would
// otherwise retry that list forever, logging each refusal, and the
// controller would never start.
func requireAccess(ctx context.Context, md metadata.Interface, gvrs ...schema.GroupVersionResource) error {
	for _, gvr := range gvrs {
		_, err := md.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		if apierrors.IsForbidden(err) {
			return fmt.Errorf("%w; svm controller needs the ClusterRole svm-controller (config/rbac) bound to this user", err)
		}
		if err != nil {
			return fmt.Errorf("list %s.%s: %w", gvr.Resource, gvr.Group, err)
		}
	}
	return nil
}

// inTreeAPI tells whether the server serves the in-tree
// storagemigration.k8s.io API in v1 (which svm hands migrations over to)
// or in v1beta1 only (whose migrations svm keeps out of the way of). The
// controller watches in-tree migrations where they are served, so it
// requires access to them as to its own.
func inTreeAPI(clients *kubeclients.Set) (served, betaServed bool, err error) {
	disc := clients.Discovery
	if served, err = intree.Served(disc); err != nil {
		return false, false, err
	}
	if betaServed, err = intree.ServedBeta(disc); err != nil {
		return false, false, err
	}
	var watched []schema.GroupVersionResource
	if served {
		watched = append(watched, inTreeMigrationsResource)
	}
	if betaServed {
		watched = append(watched, intree.BetaGroupVersion.WithResource("storageversionmigrations"))
	}
	if err := requireAccess(context.Background(), clients.Metadata, watched...); err != nil {
		return false, false, err
	}
	return served, betaServed, nil
}
