package apiservers

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

const (
	// IdentityLabel marks the Leases kube-apiservers hold in kube-system
	// to announce themselves; its value is kube-apiserver for them.
	IdentityLabel = "apiserver.kubernetes.io/identity"
	// identityValue is IdentityLabel's value on kube-apiservers' leases.
	identityValue = "kube-apiserver"
	// LeaseNamespace is where the identity leases are.
	LeaseNamespace = metav1.NamespaceSystem
	// LiveWithin is how recently an identity lease must have been renewed
	// for its server to count as running. kube-apiserver renews it every
	// 10 seconds but lets it expire only after an hour, and deletes it
	// after that: a server stopped for good would otherwise hold up every
	// rotation for an hour. A server paused for longer than this and then
	// back reports its configuration again at svm's next look.
	LiveWithin = 2 * time.Minute
)

// Identity is one running API server, as its identity lease tells.
type Identity struct {
	// ID is the server's apiServerID (the lease's name).
	ID string
	// IDHash is the ID as the server's metrics label it
	// (apiserver_id_hash): "sha256:" and the hex SHA-256 of ID.
	IDHash string
	// Renewed is when the server last renewed its lease.
	Renewed time.Time
	// PeerAddress is host:port where other API servers reach it, when it
	// publishes one (UnknownVersionInteroperabilityProxy); else "".
	PeerAddress string
}

// IDHash is how API servers' metrics label an apiServerID.
func IDHash(id string) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(id)))
}

// Identities lists the API servers whose identity leases were renewed
// within LiveWithin of now, sorted by ID.
func Identities(ctx context.Context, leases coordinationv1.LeasesGetter, now time.Time) ([]Identity, error) {
	list, err := leases.Leases(LeaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: IdentityLabel + "=" + identityValue})
	if err != nil {
		return nil, fmt.Errorf("list API server identity leases in %s: %w", LeaseNamespace, err)
	}
	var out []Identity
	for _, l := range list.Items {
		if l.Spec.RenewTime == nil || now.Sub(l.Spec.RenewTime.Time) > LiveWithin {
			continue
		}
		out = append(out, Identity{
			ID: l.Name, IDHash: IDHash(l.Name), Renewed: l.Spec.RenewTime.Time,
			PeerAddress: l.Annotations[corev1.AnnotationPeerAdvertiseAddress],
		})
	}
	slices.SortFunc(out, func(a, b Identity) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Endpoints are the URLs to read API servers' metrics from, without
// repeats: the ones given (svm controller --apiserver-endpoints), else the
// kubeconfig's server and every address identity leases publish.
func Endpoints(given []string, kubeconfigHost string, ids []Identity) []string {
	var out []string
	add := func(u string) {
		u = strings.TrimRight(u, "/")
		if u != "" && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	if len(given) > 0 {
		for _, u := range given {
			add(u)
		}
		return out
	}
	add(kubeconfigHost)
	for _, id := range ids {
		if id.PeerAddress != "" {
			add("https://" + id.PeerAddress)
		}
	}
	return out
}
