package status

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/apiservers"
	"github.com/svm-project/svm/internal/controller/migration"
	"github.com/svm-project/svm/internal/rotation"
	"github.com/svm-project/svm/test/golden"
)

// now is the fixed clock of every case: ages, rates and estimates in the
// golden files are relative to it.
var now = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

func agoPtr(d time.Duration) *metav1.Time {
	t := ago(d)
	return &t
}

func ptr[T any](v T) *T { return &v }

func newMigration(name, group, resource string, age time.Duration, st migrationv1alpha1.StorageVersionMigrationStatus) migrationv1alpha1.StorageVersionMigration {
	return migrationv1alpha1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: ago(age)},
		Spec:       migrationv1alpha1.StorageVersionMigrationSpec{Resource: migrationv1alpha1.GroupVersionResource{Group: group, Version: "v1", Resource: resource}},
		Status:     st,
	}
}

func cond(t migrationv1alpha1.MigrationConditionType, status corev1.ConditionStatus, reason, message string, at time.Duration) migrationv1alpha1.MigrationCondition {
	return migrationv1alpha1.MigrationCondition{Type: t, Status: status, Reason: reason, Message: message, LastUpdateTime: ago(at)}
}

func newStorageState(group, resource, current string, persisted []string, heartbeat time.Duration) migrationv1alpha1.StorageState {
	gr := migrationv1alpha1.GroupResource{Group: group, Resource: resource}
	return migrationv1alpha1.StorageState{
		ObjectMeta: metav1.ObjectMeta{Name: migrationv1alpha1.StorageStateName(gr), CreationTimestamp: ago(24 * time.Hour)},
		Spec:       migrationv1alpha1.StorageStateSpec{Resource: gr},
		Status: migrationv1alpha1.StorageStateStatus{
			CurrentStorageVersionHash: current, PersistedStorageVersionHashes: persisted, LastHeartbeatTime: ago(heartbeat),
		},
	}
}

func newInTree(name, group, resource string, age time.Duration, conds ...metav1.Condition) storagemigrationv1.StorageVersionMigration {
	return storagemigrationv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: ago(age)},
		Spec:       storagemigrationv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: group, Resource: resource}},
		Status:     storagemigrationv1.StorageVersionMigrationStatus{Conditions: conds},
	}
}

// The migrations of the golden cases, one per situation an operator meets.
var (
	runningWithEstimate = newMigration("widgets.example.com-7xk2p", "example.com", "widgets", 3*time.Minute, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{cond(migrationv1alpha1.MigrationRunning, corev1.ConditionTrue, "Started", "", 2*time.Minute)},
		Progress:   migrationv1alpha1.MigrationProgress{Listed: 1500, Restored: 1300, AlreadyCurrent: 100, WrittenSinceStart: 40, Gone: 10, RemainingEstimate: ptr[int64](3500)},
		StartTime:  agoPtr(2 * time.Minute),
	})
	runningWithoutEstimate = newMigration("secrets-4hq9d", "", "secrets", 10*time.Minute, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{cond(migrationv1alpha1.MigrationRunning, corev1.ConditionTrue, "Resumed", "", 50*time.Second)},
		Progress:   migrationv1alpha1.MigrationProgress{Listed: 500, Restored: 480, WrittenSinceStart: 20},
		StartTime:  agoPtr(50 * time.Second),
	})
	succeeded = newMigration("deployments.apps-x8v2m", "apps", "deployments", 90*time.Minute, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{
			cond(migrationv1alpha1.MigrationRunning, corev1.ConditionFalse, "Completed", "", 59*time.Minute),
			cond(migrationv1alpha1.MigrationSucceeded, corev1.ConditionTrue, "AllObjectsRewritten", "migrated 118 (re-stored 118, already current 0), written since the start 2, gone 0, failed 0", 59*time.Minute),
		},
		Progress:       migrationv1alpha1.MigrationProgress{Listed: 120, Restored: 118, WrittenSinceStart: 2},
		StartTime:      agoPtr(time.Hour),
		CompletionTime: agoPtr(59 * time.Minute),
	})
	failedLong = newMigration("widgets.example.com-q9z8w", "example.com", "widgets", 2*time.Hour, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{
			cond(migrationv1alpha1.MigrationRunning, corev1.ConditionFalse, "Completed", "", 100*time.Minute),
			cond(migrationv1alpha1.MigrationFailed, corev1.ConditionTrue, "ObjectsFailed",
				"3 of 2000 objects could not be rewritten; ns-a/widget-00017: admission webhook \"deny.example.com\" denied the request: test policy denies ns-a/widget-00017; "+
					"ns-b/widget-00018: admission webhook \"deny.example.com\" denied the request: test policy denies ns-b/widget-00018; "+
					"ns-c/widget-00019: admission webhook \"deny.example.com\" denied the request: test policy denies ns-c/widget-00019", 100*time.Minute),
		},
		Progress:       migrationv1alpha1.MigrationProgress{Listed: 2000, Restored: 1997, Failed: 3},
		StartTime:      agoPtr(110 * time.Minute),
		CompletionTime: agoPtr(100 * time.Minute),
	})
	// refused: a webhook refused half the objects, and no other way was
	// allowed; throughStatus: the same, written through status, the
	// refused objects' managedFields entries left naming v1.
	refused = newMigration("widgets.example.com-r4f7k", "example.com", "widgets", 40*time.Minute, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{
			cond(migrationv1alpha1.MigrationRunning, corev1.ConditionFalse, "Completed", "", 30*time.Minute),
			cond(migrationv1alpha1.MigrationFailed, corev1.ConditionTrue, "ObjectsFailed", "100 of 200 objects could not be rewritten", 30*time.Minute),
		},
		Progress:       migrationv1alpha1.MigrationProgress{Listed: 200, Restored: 100, Failed: 100, ManagedFieldsMoved: 100},
		RefusedBy:      []migrationv1alpha1.AdmissionRefusal{{Kind: "Webhook", Name: "validate.example.com", Objects: 100, Message: `admission webhook "validate.example.com" denied the request: test policy denies`}},
		StartTime:      agoPtr(31 * time.Minute),
		CompletionTime: agoPtr(30 * time.Minute),
	})
	throughStatus = newMigration("widgets-through-status", "example.com", "widgets", 20*time.Minute, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{
			cond(migrationv1alpha1.MigrationRunning, corev1.ConditionFalse, "Completed", "", 10*time.Minute),
			cond(migrationv1alpha1.MigrationSucceeded, corev1.ConditionTrue, "AllObjectsRewritten", "migrated 100 (re-stored 100, already current 0), written since the start 100, gone 0, failed 0", 10*time.Minute),
		},
		Progress: migrationv1alpha1.MigrationProgress{Listed: 200, Restored: 100, WrittenSinceStart: 100, ThroughStatus: 100,
			ManagedFieldsLeft: &migrationv1alpha1.ManagedFieldsLeft{Denied: 100}},
		StartTime:      agoPtr(11 * time.Minute),
		CompletionTime: agoPtr(10 * time.Minute),
	})
	notFound = newMigration("gadgets.example.com-m2k4d", "example.com", "gadgets", 30*time.Minute, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{
			cond(migrationv1alpha1.MigrationRunning, corev1.ConditionFalse, "ResourceNotFound", "", 30*time.Minute),
			cond(migrationv1alpha1.MigrationFailed, corev1.ConditionTrue, "ResourceNotFound", "", 30*time.Minute),
		},
		StartTime:      agoPtr(30 * time.Minute),
		CompletionTime: agoPtr(30 * time.Minute),
	})
	retrying = newMigration("configmaps-2b7cd", "", "configmaps", 20*time.Minute, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{cond(migrationv1alpha1.MigrationRunning, corev1.ConditionTrue, "Retrying",
			"list configmaps:\n\tthe server is currently unable to handle the request (get configmaps)", time.Minute)},
		Progress:  migrationv1alpha1.MigrationProgress{Listed: 1000, Restored: 600, RemainingEstimate: ptr[int64](400)},
		StartTime: agoPtr(15 * time.Minute),
	})
	pending  = newMigration("flunders.wardle.example.com-initial", "wardle.example.com", "flunders", 10*time.Second, migrationv1alpha1.StorageVersionMigrationStatus{})
	longName = newMigration("customresourcedefinitions.apiextensions.k8s.io-8fj2k", "apiextensions.k8s.io", "customresourcedefinitions", 3*24*time.Hour, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{
			cond(migrationv1alpha1.MigrationSucceeded, corev1.ConditionTrue, "AllObjectsRewritten", "migrated 12 (re-stored 0, already current 12), written since the start 0, gone 0, failed 0", 3*24*time.Hour),
		},
		Progress:       migrationv1alpha1.MigrationProgress{Listed: 12, AlreadyCurrent: 12},
		StartTime:      agoPtr(3 * 24 * time.Hour),
		CompletionTime: agoPtr(3*24*time.Hour - 2*time.Second),
	})

	// Handed to kube-controller-manager: svm counts nothing, the in-tree
	// migration of the same name does the work.
	delegatedRunning = func() migrationv1alpha1.StorageVersionMigration {
		m := newMigration("widgets.example.com-k2d9x", "example.com", "widgets", 2*time.Minute, migrationv1alpha1.StorageVersionMigrationStatus{
			Conditions:      []migrationv1alpha1.MigrationCondition{cond(migrationv1alpha1.MigrationRunning, corev1.ConditionTrue, "Started", "", 2*time.Minute)},
			StartTime:       agoPtr(2 * time.Minute),
			InTreeMigration: "widgets.example.com-k2d9x",
		})
		return m
	}()
	delegatedSucceeded = newMigration("secrets-p4n7q", "", "secrets", time.Hour, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{
			cond(migrationv1alpha1.MigrationSucceeded, corev1.ConditionTrue, "AllObjectsRewritten", "every object rewritten by kube-controller-manager's in-tree migration secrets-p4n7q", 50*time.Minute),
			cond(migrationv1alpha1.MigrationRunning, corev1.ConditionFalse, "Completed", "", 50*time.Minute),
		},
		StartTime:       agoPtr(time.Hour),
		CompletionTime:  agoPtr(50 * time.Minute),
		InTreeMigration: "secrets-p4n7q",
	})
	inTreeDelegated = newInTree("widgets.example.com-k2d9x", "example.com", "widgets", 2*time.Minute,
		metav1.Condition{Type: "Running", Status: metav1.ConditionTrue, Reason: "MigrationRunning", Message: "The migration is running", LastTransitionTime: ago(2 * time.Minute)})

	inTreePending   = newInTree("secrets-intree", "", "secrets", 5*time.Minute)
	inTreeSucceeded = newInTree("widgets-intree", "example.com", "widgets", 2*time.Hour,
		metav1.Condition{Type: "Running", Status: metav1.ConditionFalse, Reason: "Completed", LastTransitionTime: ago(time.Hour)},
		metav1.Condition{Type: "Succeeded", Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "migration succeeded", LastTransitionTime: ago(time.Hour)})
	inTreeFailed = newInTree("gadgets-intree", "example.com", "gadgets", time.Hour,
		metav1.Condition{Type: "Failed", Status: metav1.ConditionTrue, Reason: "ResourceNotFound", Message: "resource does not exist in discovery", LastTransitionTime: ago(time.Hour)})

	stateMigrated    = newStorageState("example.com", "widgets", "Tb3cR5Zx0qk=", []string{"Tb3cR5Zx0qk="}, 40*time.Second)
	stateUnknown     = newStorageState("", "secrets", "k6S1K8hGv1A=", []string{migrationv1alpha1.UnknownStorageVersionHash}, 40*time.Second)
	stateChanged     = newStorageState("apps", "deployments", "Dd9lYlNqvJw=", []string{"8aSe+NMegvE=", "Dd9lYlNqvJw="}, 3*time.Minute)
	stateManyHashes  = newStorageState("example.com", "gadgets", "mZ2Wg5bYmUo=", []string{"a1Mf3QbEj9g=", "Xy0pQ8r4TnU=", "Uz2vH7cK1sE=", "mZ2Wg5bYmUo="}, 11*time.Minute)
	stateBothUnknown = newStorageState("apiextensions.k8s.io", "customresourcedefinitions", migrationv1alpha1.UnknownStorageVersionHash, []string{migrationv1alpha1.UnknownStorageVersionHash}, 40*time.Second)
	// stateHeld: throughStatus rewrote every widget, but left entries
	// naming v1, which keep the CRD's storedVersions from being pruned.
	stateHeld = held(newStorageState("example.com", "widgets", "Tb3cR5Zx0qk=", []string{"Tb3cR5Zx0qk=", "gIwvi5rymmg="}, 40*time.Second),
		&migrationv1alpha1.PruneHold{Reason: migrationv1alpha1.PruneHeldManagedFieldsLeft, Entries: 100, Migration: "widgets-through-status", Since: agoPtr(9 * time.Minute),
			Message: "100 managedFields entries still name a version to be pruned (Denied 100): server-side apply on their objects would fail once it is removed from the CRD."})
)

// stateDisagree: a rolling upgrade half done, seen through each server's
// discovery.
var stateDisagree = disagreeing(newStorageState("resource.k8s.io", "deviceclasses", migrationv1alpha1.UnknownStorageVersionHash,
	[]string{"2aZRmHGbgnw=", "fQnA4QUCmOc="}, 20*time.Second),
	"API servers store it in different versions: storage version hash 2aZRmHGbgnw= on https://10.0.0.11:6443; storage version hash fQnA4QUCmOc= on https://10.0.0.12:6443 (apiserver-w3vfbx7q2hzn5oyd6kjc4tmra4)")

func disagreeing(s migrationv1alpha1.StorageState, message string) migrationv1alpha1.StorageState {
	s.Status.ServersDisagree = message
	return s
}

func held(s migrationv1alpha1.StorageState, h *migrationv1alpha1.PruneHold) migrationv1alpha1.StorageState {
	s.Status.PruneHeld = h
	return s
}

// Encryption at rest: two API servers, the configuration they had and the
// one they move to, as their metrics name them.
const (
	serverA   = "apiserver-ktcmg4mklakbkvqzu5y4lbd6ny"
	serverB   = "apiserver-w3vfbx7q2hzn5oyd6kjc4tmra4"
	endpointA = "https://10.0.0.11:6443"
	endpointB = "https://10.0.0.12:6443"
	configOld = "sha256:0f9e8d7c6b5a49382716051f2e3d4c5b6a798897a6b5c4d3e2f1a0b9c8d7e6f5"
	configNew = "sha256:1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809"
)

func identities(names ...string) []apiservers.Identity {
	var out []apiservers.Identity
	for _, n := range names {
		out = append(out, apiservers.Identity{ID: n, IDHash: apiservers.IDHash(n), Renewed: now.Add(-5 * time.Second)})
	}
	return out
}

func loaded(name, endpoint, config string, at time.Duration) apiservers.Report {
	return apiservers.Report{Endpoint: endpoint, IDHash: apiservers.IDHash(name), ConfigHash: config, LoadedAt: now.Add(-at)}
}

func agree(ids []apiservers.Identity, reports ...apiservers.Report) *rotation.Agreement {
	a := rotation.Agree(ids, reports, nil)
	return &a
}

func withEncryption(s migrationv1alpha1.StorageState, e migrationv1alpha1.StorageEncryption) migrationv1alpha1.StorageState {
	s.Status.Encryption = &e
	return s
}

// rewritten is what svm controller records when a re-encryption under
// config, by migration by, ended at ago before now.
func rewritten(resource, config, by string, at time.Duration) migrationv1alpha1.StorageEncryption {
	return migrationv1alpha1.StorageEncryption{
		ConfigHash: config, RewrittenConfigHash: config, RewrittenTime: agoPtr(at), RewrittenBy: by,
		Message: "Every object of " + resource + " was rewritten under configuration " + config + " at " +
			now.Add(-at).Format(time.RFC3339) + " (migration " + by + "): objects written through the API no longer need keys the configuration only reads with",
	}
}

func reencryption(name, resource string, age time.Duration, st migrationv1alpha1.StorageVersionMigrationStatus) migrationv1alpha1.StorageVersionMigration {
	m := newMigration(name, "", resource, age, st)
	m.Labels = map[string]string{rotation.CreatedByLabel: rotation.CreatedByValue}
	return m
}

var (
	// Both servers loaded the new configuration half an hour ago, and
	// svm rewrote secrets and configmaps under it since.
	bothOnNew = agree(identities(serverA, serverB),
		loaded(serverA, endpointA, configNew, 31*time.Minute), loaded(serverB, endpointB, configNew, 30*time.Minute))
	// Server A reloaded three minutes ago; server B failed to, and keeps
	// the configuration it started with a day ago.
	oneReloaded = func() *rotation.Agreement {
		b := loaded(serverB, endpointB, configOld, 26*time.Hour)
		b.ReloadFailedAt = now.Add(-2 * time.Minute)
		return agree(identities(serverA, serverB), loaded(serverA, endpointA, configNew, 3*time.Minute), b)
	}()
	// Both servers moved to the new configuration five minutes ago.
	bothJustMoved = agree(identities(serverA, serverB),
		loaded(serverA, endpointA, configNew, 6*time.Minute), loaded(serverB, endpointB, configNew, 5*time.Minute))
	// A cluster without encryption at rest: the server names no
	// configuration, nor itself.
	noEncryption = agree(nil, apiservers.Report{Endpoint: endpointA, LoadedAt: now.Add(-48 * time.Hour)})

	secretsRewrittenNew    = withEncryption(newStorageState("", "secrets", "k6S1K8hGv1A=", []string{"k6S1K8hGv1A="}, 40*time.Second), rewritten("secrets", configNew, "secrets-reencrypt-7xk2p", 20*time.Minute))
	configMapsRewrittenNew = withEncryption(newStorageState("", "configmaps", "qFhB6QOjVdI=", []string{"qFhB6QOjVdI="}, 40*time.Second), rewritten("configmaps", configNew, "configmaps-reencrypt-m4q8z", 25*time.Minute))
	secretsReencryptDone   = reencryption("secrets-reencrypt-7xk2p", "secrets", 29*time.Minute, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{
			cond(migrationv1alpha1.MigrationRunning, corev1.ConditionFalse, "Completed", "", 20*time.Minute),
			cond(migrationv1alpha1.MigrationSucceeded, corev1.ConditionTrue, "AllObjectsRewritten", "migrated 2400 (re-stored 2400, already current 0), written since the start 0, gone 0, failed 0", 20*time.Minute),
		},
		Progress:       migrationv1alpha1.MigrationProgress{Listed: 2400, Restored: 2400},
		StartTime:      agoPtr(29 * time.Minute),
		CompletionTime: agoPtr(20 * time.Minute),
	})
	// The secrets were last rewritten under the old configuration, a week
	// ago; svm controller now waits for server B.
	secretsWaiting = withEncryption(newStorageState("", "secrets", "k6S1K8hGv1A=", []string{"k6S1K8hGv1A="}, 40*time.Second), func() migrationv1alpha1.StorageEncryption {
		e := rewritten("secrets", configOld, "secrets-reencrypt-b2n6c", 7*24*time.Hour)
		e.ConfigHash, e.Message = "", "Waiting: "+oneReloaded.Waiting
		return e
	}())
	// The servers agree on the new configuration; svm controller
	// re-encrypts the secrets, last rewritten under the old one, and is
	// done with the configmaps.
	secretsReencrypting = withEncryption(newStorageState("", "secrets", "k6S1K8hGv1A=", []string{"k6S1K8hGv1A="}, 40*time.Second), func() migrationv1alpha1.StorageEncryption {
		e := rewritten("secrets", configOld, "secrets-reencrypt-b2n6c", 7*24*time.Hour)
		e.ConfigHash = configNew
		e.Message = "Re-encrypting every object under configuration " + configNew + " (migration secrets-reencrypt-q8w2e); until it succeeds, keys of earlier configurations are still needed"
		return e
	}())
	configMapsJustRewritten = withEncryption(newStorageState("", "configmaps", "qFhB6QOjVdI=", []string{"qFhB6QOjVdI="}, 40*time.Second), rewritten("configmaps", configNew, "configmaps-reencrypt-k3v9d", time.Minute))
	secretsReencryptRunning = reencryption("secrets-reencrypt-q8w2e", "secrets", 4*time.Minute, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{cond(migrationv1alpha1.MigrationRunning, corev1.ConditionTrue, "Started", "", 4*time.Minute)},
		Progress:   migrationv1alpha1.MigrationProgress{Listed: 900, Restored: 900, RemainingEstimate: ptr[int64](1500)},
		StartTime:  agoPtr(4 * time.Minute),
	})
)

// A KMS v2 key rotation: the plugin of provider kms1 answers key ID "B"
// since ten minutes, after "A"; both servers write under B, and svm
// controller rewrote the secrets under it.
const (
	kmsKeyA = "sha256:559aead08264d5795d3909718cdd05abd49572e84fe55590eef31a88a08fdffd"
	kmsKeyB = "sha256:df7e70e5021544f4834bbee64a9e3789febc4be81470df629cad6ddb03320a5c"
)

var (
	bothOnKeyB = func() *rotation.Agreement {
		onB := func(name, endpoint string) apiservers.Report {
			r := loaded(name, endpoint, configNew, 2*time.Hour)
			r.KMS = []apiservers.KMSKey{{Provider: "kms1", KeyIDHash: kmsKeyB, StatusAt: now.Add(-30 * time.Second),
				OtherStatusAt: now.Add(-11 * time.Minute), WroteAt: now.Add(-10 * time.Second)}}
			return r
		}
		return agree(identities(serverA, serverB), onB(serverA, endpointA), onB(serverB, endpointB))
	}()
	secretsRewrittenKeyB = withEncryption(newStorageState("", "secrets", "k6S1K8hGv1A=", []string{"k6S1K8hGv1A="}, 40*time.Second), func() migrationv1alpha1.StorageEncryption {
		keys := []migrationv1alpha1.KMSKey{{Provider: "kms1", KeyIDHash: kmsKeyB}}
		e := rewritten("secrets", configNew, "secrets-reencrypt-t7h3s", 2*time.Minute)
		e.KMSKeys, e.RewrittenKMSKeys = keys, keys
		e.Message = "Every object of secrets was rewritten under configuration " + configNew + " with KMS v2 keys kms1=" + kmsKeyB + " at " +
			now.Add(-2*time.Minute).Format(time.RFC3339) + " (migration secrets-reencrypt-t7h3s): objects written through the API no longer need keys the configuration only reads with or KMS v2 keys other than these"
		return e
	}())
)

func svmInput(ms ...migrationv1alpha1.StorageVersionMigration) Input {
	return Input{Now: now, SVMServed: true, InTreeServed: true, Migrations: ms}
}

func TestStatusGolden(t *testing.T) {
	tests := []struct {
		name string
		in   Input
		yaml bool
	}{
		{name: "running-with-estimate", in: svmInput(runningWithEstimate)},
		{name: "running-without-estimate", in: svmInput(runningWithoutEstimate)},
		// Pacing is shown for running migrations only: a finished one's
		// last status.pacing is history.
		{name: "running-paced", in: svmInput(paced(runningWithEstimate, 18), paced(runningWithoutEstimate, 0), paced(succeeded, 12))},
		// Under --qps: the cap, and the writes in flight it allows.
		{name: "running-paced-qps", in: svmInput(pacedAt(runningWithEstimate, "100"), pacedAt(runningWithoutEstimate, "2.5"))},
		{name: "succeeded", in: svmInput(succeeded)},
		{name: "failed-long-message", in: svmInput(failedLong, notFound)},
		{name: "retrying", in: svmInput(retrying)},
		// Admission: who refused, and the managedFields entries left.
		{name: "admission", yaml: true, in: Input{Now: now, SVMServed: true, InTreeServed: true,
			Migrations: []migrationv1alpha1.StorageVersionMigration{refused, throughStatus}, StorageStates: []migrationv1alpha1.StorageState{stateHeld}}},
		{name: "pending", in: svmInput(pending)},
		{name: "in-tree", in: Input{Now: now, SVMServed: true, InTreeServed: true,
			InTreeMigrations: []storagemigrationv1.StorageVersionMigration{inTreeSucceeded, inTreePending, inTreeFailed}}},
		{name: "delegated", in: Input{Now: now, SVMServed: true, InTreeServed: true,
			Migrations:       []migrationv1alpha1.StorageVersionMigration{delegatedRunning, delegatedSucceeded},
			InTreeMigrations: []storagemigrationv1.StorageVersionMigration{inTreeDelegated}}},
		{name: "storage-states", in: Input{Now: now, SVMServed: true,
			StorageStates: []migrationv1alpha1.StorageState{stateUnknown, stateMigrated, stateChanged, stateManyHashes, stateBothUnknown}}},
		{name: "storage-states-servers-disagree", in: Input{Now: now, SVMServed: true,
			StorageStates: []migrationv1alpha1.StorageState{stateMigrated, stateDisagree}}},
		{name: "empty-cluster", in: Input{Now: now, SVMServed: true, InTreeServed: true}},
		{name: "svm-not-installed", in: Input{Now: now, InTreeServed: true,
			// Whatever was passed for svm's API is ignored when it is not served.
			Migrations:       []migrationv1alpha1.StorageVersionMigration{succeeded},
			InTreeMigrations: []storagemigrationv1.StorageVersionMigration{inTreePending}}},
		{name: "in-tree-not-served", in: Input{Now: now, SVMServed: true, Migrations: []migrationv1alpha1.StorageVersionMigration{succeeded},
			InTreeMigrations: []storagemigrationv1.StorageVersionMigration{inTreePending}}},
		{name: "mixed", yaml: true, in: Input{Now: now, SVMServed: true, InTreeServed: true,
			Migrations: []migrationv1alpha1.StorageVersionMigration{
				succeeded, longName, pending, failedLong, runningWithoutEstimate, retrying, runningWithEstimate, notFound,
			},
			InTreeMigrations: []storagemigrationv1.StorageVersionMigration{inTreeSucceeded, inTreePending},
			StorageStates:    []migrationv1alpha1.StorageState{stateMigrated, stateUnknown, stateChanged},
		}},
		// Encryption at rest.
		{name: "encryption-rewritten", yaml: true, in: Input{Now: now, SVMServed: true, InTreeServed: true,
			Migrations:    []migrationv1alpha1.StorageVersionMigration{secretsReencryptDone},
			StorageStates: []migrationv1alpha1.StorageState{secretsRewrittenNew, stateMigrated, configMapsRewrittenNew},
			Encryption:    bothOnNew,
		}},
		{name: "encryption-waiting", in: Input{Now: now, SVMServed: true, InTreeServed: true,
			StorageStates: []migrationv1alpha1.StorageState{secretsWaiting},
			Encryption:    oneReloaded,
		}},
		{name: "encryption-older-configuration", in: Input{Now: now, SVMServed: true, InTreeServed: true,
			Migrations:    []migrationv1alpha1.StorageVersionMigration{secretsReencryptRunning},
			StorageStates: []migrationv1alpha1.StorageState{secretsReencrypting, configMapsJustRewritten},
			Encryption:    bothJustMoved,
		}},
		{name: "encryption-kms-rotated", yaml: true, in: Input{Now: now, SVMServed: true, InTreeServed: true,
			StorageStates: []migrationv1alpha1.StorageState{secretsRewrittenKeyB},
			Encryption:    bothOnKeyB,
		}},
		// Server B's lease names it, but its metrics were not read; nothing
		// records a re-encryption.
		{name: "encryption-not-recorded", in: Input{Now: now, SVMServed: true, InTreeServed: true,
			StorageStates: []migrationv1alpha1.StorageState{stateMigrated},
			Encryption:    agree(identities(serverA, serverB), loaded(serverA, endpointA, configNew, time.Hour)),
		}},
		// No configuration, nothing recorded: exactly what the table
		// showed before svm knew of encryption at rest.
		{name: "encryption-off", in: Input{Now: now, SVMServed: true, InTreeServed: true,
			StorageStates: []migrationv1alpha1.StorageState{stateMigrated},
			Encryption:    noEncryption,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Build(tt.in)
			var table, js bytes.Buffer
			if err := WriteTable(&table, r); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&js, r); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tt.name+".txt", table.Bytes())
			golden.Check(t, tt.name+".json", js.Bytes())
			if tt.yaml {
				// -o wide, for the same case: a column per outcome.
				var wide bytes.Buffer
				if err := WriteWideTable(&wide, r); err != nil {
					t.Fatal(err)
				}
				golden.Check(t, tt.name+"-wide.txt", wide.Bytes())
				var y bytes.Buffer
				if err := WriteYAML(&y, r); err != nil {
					t.Fatal(err)
				}
				golden.Check(t, tt.name+".yaml", y.Bytes())
				golden.DecodesYAML(t, y.Bytes(), r)
			}
			golden.DecodesJSON(t, js.Bytes(), r)
			for _, line := range strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n") {
				if n := utf8.RuneCountInString(line); n > TableWidth {
					t.Errorf("line is %d columns wide, more than %d:\n%s", n, TableWidth, line)
				}
				if line != strings.TrimRight(line, " ") {
					t.Errorf("line ends in spaces: %q", line)
				}
			}
		})
	}
}

// paced is m with status.pacing as svm's engine writes it; knee 0 is a
// curve without one yet.
func paced(m migrationv1alpha1.StorageVersionMigration, knee int32) migrationv1alpha1.StorageVersionMigration {
	m = *m.DeepCopy()
	m.Status.Pacing = &migrationv1alpha1.MigrationPacing{
		WritesPerSecond: 362, // 21 writes in flight / 58ms, by Little's law
		WritesInFlight:  21, Window: 22, SmoothedLatency: metav1.Duration{Duration: 58 * time.Millisecond},
		KneeWrites: knee, LastDecision: "Knee",
	}
	if knee == 0 {
		m.Status.Pacing.LastDecision = "Grow"
	}
	return m
}

// pacedAt is m with status.pacing as svm's engine writes it under --qps:
// the cap held the writes in flight under the window.
func pacedAt(m migrationv1alpha1.StorageVersionMigration, qps string) migrationv1alpha1.StorageVersionMigration {
	m = *m.DeepCopy()
	q := resource.MustParse(qps)
	m.Status.Pacing = &migrationv1alpha1.MigrationPacing{
		WritesPerSecond: int32(q.AsApproximateFloat64()), QPS: &q, RateWindow: 1,
		WritesInFlight: 1, Window: 8, SmoothedLatency: metav1.Duration{Duration: 7 * time.Millisecond}, LastDecision: "Hold",
	}
	return m
}

func TestStatusBuild(t *testing.T) {
	tests := []struct {
		name string
		m    migrationv1alpha1.StorageVersionMigration
		want Migration
	}{{
		// 1450 objects handled in 120s; 3550 left at 12.08/s.
		name: "running with estimate",
		m:    runningWithEstimate,
		want: Migration{
			Name: "widgets.example.com-7xk2p", Source: SourceSVM, Group: "example.com", Resource: "widgets",
			State: StateRunning, Reason: "Started", CreationTimestamp: ago(3 * time.Minute), StartTime: agoPtr(2 * time.Minute),
			Progress:         &Progress{Listed: 1500, Migrated: 1400, Restored: 1300, AlreadyCurrent: 100, WrittenSinceStart: 40, Gone: 10, RemainingEstimate: ptr[int64](3500), Total: 5000, TotalKnown: true},
			ObjectsPerSecond: ptr(12.08), ETASeconds: ptr[int64](294),
		},
	}, {
		name: "running without estimate has no ETA",
		m:    runningWithoutEstimate,
		want: Migration{
			Name: "secrets-4hq9d", Source: SourceSVM, Resource: "secrets",
			State: StateRunning, Reason: "Resumed", CreationTimestamp: ago(10 * time.Minute), StartTime: agoPtr(50 * time.Second),
			Progress:         &Progress{Listed: 500, Migrated: 480, Restored: 480, WrittenSinceStart: 20, Total: 500},
			ObjectsPerSecond: ptr(10.0),
		},
	}, {
		name: "retrying has no ETA",
		m:    retrying,
		want: Migration{
			Name: "configmaps-2b7cd", Source: SourceSVM, Resource: "configmaps",
			State: StateRetrying, Reason: "Retrying", Message: retrying.Status.Conditions[0].Message,
			CreationTimestamp: ago(20 * time.Minute), StartTime: agoPtr(15 * time.Minute),
			Progress:         &Progress{Listed: 1000, Migrated: 600, Restored: 600, RemainingEstimate: ptr[int64](400), Total: 1400, TotalKnown: true},
			ObjectsPerSecond: ptr(0.67),
		},
	}, {
		// The rate ends at completion, not now.
		name: "succeeded",
		m:    succeeded,
		want: Migration{
			Name: "deployments.apps-x8v2m", Source: SourceSVM, Group: "apps", Resource: "deployments",
			State: StateSucceeded, Reason: "AllObjectsRewritten", Message: succeeded.Status.Conditions[1].Message,
			CreationTimestamp: ago(90 * time.Minute), StartTime: agoPtr(time.Hour), CompletionTime: agoPtr(59 * time.Minute),
			Progress:         &Progress{Listed: 120, Migrated: 118, Restored: 118, WrittenSinceStart: 2, Total: 120, TotalKnown: true},
			ObjectsPerSecond: ptr(2.0),
		},
	}, {
		name: "pending",
		m:    pending,
		want: Migration{
			Name: "flunders.wardle.example.com-initial", Source: SourceSVM, Group: "wardle.example.com", Resource: "flunders",
			State: StatePending, CreationTimestamp: ago(10 * time.Second), Progress: &Progress{},
		},
	}, {
		// A crash between two writes could leave Running True next to a
		// final condition; the final one wins.
		name: "failed wins over running",
		m: newMigration("x", "", "secrets", time.Minute, migrationv1alpha1.StorageVersionMigrationStatus{
			Conditions: []migrationv1alpha1.MigrationCondition{
				cond(migrationv1alpha1.MigrationRunning, corev1.ConditionTrue, "Started", "", time.Minute),
				cond(migrationv1alpha1.MigrationFailed, corev1.ConditionTrue, "Forbidden", "secrets is forbidden", time.Minute),
			},
		}),
		want: Migration{
			Name: "x", Source: SourceSVM, Resource: "secrets", State: StateFailed, Reason: "Forbidden", Message: "secrets is forbidden",
			CreationTimestamp: ago(time.Minute), Progress: &Progress{TotalKnown: true},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Build(svmInput(tt.m))
			if diff := cmp.Diff([]Migration{tt.want}, r.Migrations); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatusStorageStateMigrated(t *testing.T) {
	tests := []struct {
		name      string
		current   string
		persisted []string
		want      bool
	}{
		{"current alone", "abc=", []string{"abc="}, true},
		{"old hash left", "abc=", []string{"old=", "abc="}, false},
		{"unknown persisted", "abc=", []string{"Unknown"}, false},
		{"unknown current", "Unknown", []string{"Unknown"}, false},
		{"nothing recorded", "", nil, false},
		{"stale hash only", "abc=", []string{"old="}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStorageState("", "secrets", tt.current, tt.persisted, time.Minute)
			if got := storageState(&s).Migrated; got != tt.want {
				t.Errorf("Migrated = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStatusSummary(t *testing.T) {
	tests := []struct {
		name string
		in   Input
		want string
	}{
		{"none", svmInput(), "no migrations"},
		{"one", svmInput(pending), "1 migration: 1 pending"},
		{"mixed", Input{Now: now, SVMServed: true, InTreeServed: true,
			Migrations:       []migrationv1alpha1.StorageVersionMigration{succeeded, retrying, runningWithEstimate, failedLong, longName},
			InTreeMigrations: []storagemigrationv1.StorageVersionMigration{inTreePending}},
			"6 migrations: 1 running, 1 retrying, 1 pending, 1 failed, 2 succeeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summary(Build(tt.in)); got != tt.want {
				t.Errorf("Summary = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStatusCut(t *testing.T) {
	tests := []struct {
		in, middle, end string
	}{
		{"short", "short", "short"},
		{"exactly-10", "exactly-10", "exactly-10"},
		{"widgets.example.com", "widg...com", "widgets..."},
		{"a\n\tb  c", "a b c", "a b c"},
	}
	for _, tt := range tests {
		if got := cutMiddle(tt.in, 10); got != tt.middle {
			t.Errorf("cutMiddle(%q, 10) = %q, want %q", tt.in, got, tt.middle)
		}
		if got := cutEnd(oneLine(tt.in), 10); got != tt.end {
			t.Errorf("cutEnd(%q, 10) = %q, want %q", tt.in, got, tt.end)
		}
	}
}

// The table tells Retrying from Running by the controller's reason; keep
// the two in step.
func TestStatusRetryingReason(t *testing.T) {
	if reasonRetrying != migration.ReasonRetrying {
		t.Errorf("reasonRetrying is %q, the controller sets %q", reasonRetrying, migration.ReasonRetrying)
	}
}

// TestStatusEncryption checks when the encryption section shows and what
// its verdict claims in each case the golden files do not cover.
func TestStatusEncryption(t *testing.T) {
	leasesForbidden := `list API server identity leases in kube-system: leases.coordination.k8s.io is forbidden: User "viewer" cannot list resource "leases"`
	// Without the leases, the server reached is taken to be all.
	reachedOnly := agree(nil, loaded(serverA, endpointA, configNew, 31*time.Minute))
	metricsForbidden := func() *rotation.Agreement {
		a := rotation.Agree(identities(serverA), nil, []rotation.Failure{{Endpoint: endpointA, Err: errors.New(`forbidden: User "viewer" cannot get path "/metrics"`)}})
		return &a
	}()
	states := []migrationv1alpha1.StorageState{secretsRewrittenNew}
	tests := []struct {
		name string
		in   Input
		// want: no section when section is false; else allRewritten and
		// what the verdict says, and never says.
		section      bool
		allRewritten bool
		says         []string
		never        []string
	}{{
		name: "metrics forbidden, nothing recorded: silent",
		in:   Input{Now: now, SVMServed: true, StorageStates: []migrationv1alpha1.StorageState{stateMigrated}, Encryption: metricsForbidden},
	}, {
		name: "leases forbidden, nothing recorded, no configuration: silent",
		in:   Input{Now: now, SVMServed: true, Encryption: noEncryption, EncryptionError: leasesForbidden},
	}, {
		name: "not read, nothing recorded: silent",
		in:   Input{Now: now, SVMServed: true, StorageStates: []migrationv1alpha1.StorageState{stateMigrated}},
	}, {
		name: "svm's API not served: its states are ignored",
		in:   Input{Now: now, StorageStates: states, Encryption: metricsForbidden},
	}, {
		// svm controller, with its own permissions, may well have read
		// them: svm status says what it could not read, not that
		// re-encryption waits.
		name: "metrics forbidden, a re-encryption recorded: the section says why it cannot tell", section: true,
		in: Input{Now: now, SVMServed: true, StorageStates: states, Encryption: metricsForbidden},
		says: []string{"svm status cannot tell that every API server has loaded the same configuration: the metrics of " + endpointA + " could not be read", "still needed as far as it knows",
			"svm controller last recorded for secrets: Every object of secrets was rewritten under configuration " + configNew},
		never: []string{"Re-encryption waits"},
	}, {
		name: "leases and metrics forbidden", section: true,
		in: Input{Now: now, SVMServed: true, StorageStates: states, EncryptionError: leasesForbidden,
			Encryption: func() *rotation.Agreement {
				a := rotation.Agree(nil, nil, []rotation.Failure{{Endpoint: endpointA, Err: errors.New("forbidden")}})
				return &a
			}()},
		says:  []string{"svm status cannot tell that every API server has loaded the same configuration", leasesForbidden},
		never: []string{"Re-encryption waits"},
	}, {
		// Both servers read and on the same configuration: an endpoint
		// given that fails holds up svm status, not svm controller.
		name: "a failed endpoint besides servers that agree", section: true,
		in: Input{Now: now, SVMServed: true, StorageStates: states, Encryption: func() *rotation.Agreement {
			a := rotation.Agree(identities(serverA), []apiservers.Report{loaded(serverA, endpointA, configNew, time.Hour)},
				[]rotation.Failure{{Endpoint: "https://127.0.0.1:1", Err: errors.New("connection refused")}})
			return &a
		}()},
		says:  []string{"cannot tell", "https://127.0.0.1:1"},
		never: []string{"Re-encryption waits"},
	}, {
		// Both servers read, one plugin rotated: they disagree on the
		// key, as two configurations would, and svm status says so
		// itself rather than that it cannot tell.
		name: "the servers' plugins answer different KMS v2 keys", section: true,
		in: Input{Now: now, SVMServed: true, StorageStates: []migrationv1alpha1.StorageState{secretsRewrittenKeyB}, Encryption: func() *rotation.Agreement {
			on := func(name, endpoint, key string) apiservers.Report {
				r := loaded(name, endpoint, configNew, 2*time.Hour)
				r.KMS = []apiservers.KMSKey{{Provider: "kms1", KeyIDHash: key, StatusAt: now.Add(-30 * time.Second), WroteAt: now.Add(-10 * time.Second)}}
				return r
			}
			return agree(identities(serverA, serverB), on(serverA, endpointA, kmsKeyA), on(serverB, endpointB, kmsKeyB))
		}()},
		says:  []string{"Re-encryption waits: the API servers' KMS v2 provider kms1 answers different keys", "Every key in every loaded configuration is still needed."},
		never: []string{"cannot tell"},
	}, {
		name: "not read, a re-encryption recorded", section: true,
		in:   Input{Now: now, SVMServed: true, StorageStates: states},
		says: []string{"were not read", "every key is still needed as far as svm knows"},
	}, {
		name: "leases forbidden, all rewritten: no key let go of without the caveat", section: true,
		in:    Input{Now: now, SVMServed: true, StorageStates: states, Encryption: reachedOnly, EncryptionError: leasesForbidden},
		says:  []string{"Every API server reached has loaded encryption configuration " + configNew, "cannot tell whether other API servers run: if none does", leasesForbidden},
		never: []string{"Every API server has loaded"},
	}, {
		name: "all rewritten", section: true, allRewritten: true,
		in:   Input{Now: now, SVMServed: true, StorageStates: states, Encryption: reachedOnly},
		says: []string{"Every API server has loaded encryption configuration " + configNew + " (since 2026-07-01T11:29:00Z) and every object of secrets has been rewritten under it"},
	}, {
		name: "encryption turned off after a re-encryption", section: true,
		in:   Input{Now: now, SVMServed: true, StorageStates: states, Encryption: noEncryption},
		says: []string{"No API server has an encryption configuration loaded: objects are written unencrypted."},
	}, {
		name: "encryption turned off, leases forbidden", section: true,
		in:    Input{Now: now, SVMServed: true, StorageStates: states, Encryption: noEncryption, EncryptionError: leasesForbidden},
		says:  []string{"No API server reached has an encryption configuration loaded", "cannot tell whether other API servers run"},
		never: []string{"No API server has"},
	}, {
		name: "svm controller has not looked since the servers agreed", section: true,
		in: Input{Now: now, SVMServed: true, Encryption: bothJustMoved, StorageStates: []migrationv1alpha1.StorageState{
			withEncryption(newStorageState("", "secrets", "k6S1K8hGv1A=", nil, time.Hour), rewritten("secrets", configOld, "secrets-reencrypt-b2n6c", 7*24*time.Hour)),
		}},
		says: []string{"Objects of secrets have not all been rewritten under configuration " + configNew, "secrets: svm controller has not recorded configuration " + configNew + " yet."},
		// The state's message speaks of the old configuration.
		never: []string{"no longer need keys"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Build(tt.in)
			if !tt.section {
				if r.Encryption != nil {
					t.Fatalf("encryption section %+v, want none", r.Encryption)
				}
				var table bytes.Buffer
				if err := WriteTable(&table, r); err != nil {
					t.Fatal(err)
				}
				if strings.Contains(table.String(), "ENCRYPTION") {
					t.Errorf("the table shows encryption:\n%s", table.String())
				}
				return
			}
			if r.Encryption == nil {
				t.Fatal("no encryption section")
			}
			e := r.Encryption
			if e.AllRewritten != tt.allRewritten {
				t.Errorf("allRewritten %v, want %v; verdict %q", e.AllRewritten, tt.allRewritten, e.Verdict)
			}
			for _, s := range tt.says {
				if !strings.Contains(e.Verdict, s) {
					t.Errorf("verdict %q does not say %q", e.Verdict, s)
				}
			}
			for _, s := range tt.never {
				if strings.Contains(e.Verdict, s) {
					t.Errorf("verdict %q says %q", e.Verdict, s)
				}
			}
			for _, res := range e.Resources {
				var state *migrationv1alpha1.StorageState
				for i := range tt.in.StorageStates {
					if tt.in.StorageStates[i].Name == res.Name {
						state = &tt.in.StorageStates[i]
					}
				}
				want := tt.in.Encryption != nil && rotation.Current(*tt.in.Encryption, state.Status.Encryption)
				if res.Current != want {
					t.Errorf("%s: current %v, want %v", res.Name, res.Current, want)
				}
			}
		})
	}
}
