package rotation

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/apiservers"
)

var t0 = time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)

const (
	c1 = "sha256:c1"
	c2 = "sha256:c2"
)

func id(name string) apiservers.Identity {
	return apiservers.Identity{ID: name, IDHash: apiservers.IDHash(name)}
}

func report(name, config string, loaded time.Time) apiservers.Report {
	return apiservers.Report{Endpoint: "https://" + name, IDHash: apiservers.IDHash(name), ConfigHash: config, LoadedAt: loaded}
}

func TestAgree(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ids      []apiservers.Identity
		reports  []apiservers.Report
		failures []Failure
		agreed   bool
		config   string
		since    time.Time
		waiting  []string // substrings of Waiting
	}{{
		name:    "one server",
		ids:     []apiservers.Identity{id("a")},
		reports: []apiservers.Report{report("a", c2, t0)},
		agreed:  true, config: c2, since: t0,
	}, {
		name:    "all three agree; since the last load",
		ids:     []apiservers.Identity{id("a"), id("b"), id("c")},
		reports: []apiservers.Report{report("a", c2, t0), report("b", c2, t0.Add(time.Minute)), report("c", c2, t0.Add(-time.Hour))},
		agreed:  true, config: c2, since: t0.Add(time.Minute),
	}, {
		name:    "one of three reloaded",
		ids:     []apiservers.Identity{id("a"), id("b"), id("c")},
		reports: []apiservers.Report{report("a", c2, t0), report("b", c1, t0), report("c", c1, t0)},
		waiting: []string{"different encryption configurations", "API server a has configuration sha256:c2", "API server b has configuration sha256:c1"},
	}, {
		name:    "a server the leases name was not reached",
		ids:     []apiservers.Identity{id("a"), id("b")},
		reports: []apiservers.Report{report("a", c2, t0)},
		waiting: []string{"API server b did not report", "--apiserver-endpoints"},
	}, {
		name:     "an endpoint failed",
		ids:      []apiservers.Identity{id("a")},
		reports:  []apiservers.Report{report("a", c2, t0)},
		failures: []Failure{{Endpoint: "https://b", Err: errors.New("forbidden")}},
		waiting:  []string{"metrics of https://b could not be read (forbidden)"},
	}, {
		name:    "leases not readable: the servers reached are all",
		reports: []apiservers.Report{report("a", c2, t0), report("b", c2, t0)},
		agreed:  true, config: c2, since: t0,
	}, {
		name:    "no encryption anywhere",
		ids:     []apiservers.Identity{id("a")},
		reports: []apiservers.Report{{Endpoint: "https://a", LoadedAt: t0}},
		// The unnamed report cannot be matched to lease a: svm waits.
		waiting: []string{"API server a did not report"},
	}, {
		name:    "no encryption, no leases",
		reports: []apiservers.Report{{Endpoint: "https://a", LoadedAt: t0}},
		agreed:  true, since: t0,
	}, {
		name:    "one encrypts, one does not",
		reports: []apiservers.Report{report("a", c2, t0), {Endpoint: "https://b", LoadedAt: t0}},
		waiting: []string{"the API server at https://a has configuration sha256:c2", "the API server at https://b has no encryption configuration"},
	}, {
		name:    "nothing found",
		waiting: []string{"no API server was found"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			a := Agree(tc.ids, tc.reports, tc.failures)
			if a.Agreed != tc.agreed || a.ConfigHash != tc.config || !a.Since.Equal(tc.since) {
				t.Errorf("Agree = agreed %v, config %q, since %s; want %v, %q, %s (waiting %q)", a.Agreed, a.ConfigHash, a.Since, tc.agreed, tc.config, tc.since, a.Waiting)
			}
			if tc.agreed != (a.Waiting == "") {
				t.Errorf("agreed %v with waiting %q", a.Agreed, a.Waiting)
			}
			for _, w := range tc.waiting {
				if !strings.Contains(a.Waiting, w) {
					t.Errorf("waiting %q does not say %q", a.Waiting, w)
				}
			}
		})
	}
}

func migration(name, config string, created time.Time, conds ...migrationv1alpha1.MigrationCondition) migrationv1alpha1.StorageVersionMigration {
	return migrationv1alpha1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, CreationTimestamp: metav1.NewTime(created),
			Labels:      map[string]string{CreatedByLabel: CreatedByValue},
			Annotations: map[string]string{ConfigHashAnnotation: config},
		},
		Status: migrationv1alpha1.StorageVersionMigrationStatus{Conditions: conds},
	}
}

// users is a migration svm's re-encryption did not make.
func users(name string, created time.Time, conds ...migrationv1alpha1.MigrationCondition) migrationv1alpha1.StorageVersionMigration {
	m := migration(name, "", created, conds...)
	m.Labels, m.Annotations = nil, nil
	return m
}

func succeeded(at time.Time) migrationv1alpha1.MigrationCondition {
	return migrationv1alpha1.MigrationCondition{Type: migrationv1alpha1.MigrationSucceeded, Status: corev1.ConditionTrue, LastUpdateTime: metav1.NewTime(at)}
}

func failedAt(at time.Time) migrationv1alpha1.MigrationCondition {
	return migrationv1alpha1.MigrationCondition{Type: migrationv1alpha1.MigrationFailed, Status: corev1.ConditionTrue, LastUpdateTime: metav1.NewTime(at)}
}

func state(e *migrationv1alpha1.StorageEncryption) *migrationv1alpha1.StorageState {
	return &migrationv1alpha1.StorageState{ObjectMeta: metav1.ObjectMeta{Name: "secrets"}, Status: migrationv1alpha1.StorageStateStatus{Encryption: e}}
}

func TestDecide(t *testing.T) {
	agreed := Agree([]apiservers.Identity{id("a")}, []apiservers.Report{report("a", c2, t0)}, nil)
	split := Agree([]apiservers.Identity{id("a"), id("b")}, []apiservers.Report{report("a", c2, t0), report("b", c1, t0)}, nil)
	none := Agree(nil, []apiservers.Report{{Endpoint: "https://a", LoadedAt: t0}}, nil)
	unread := Agree(nil, []apiservers.Report{{Endpoint: "https://a", LoadedAt: t0}}, []Failure{{Endpoint: "https://b", Err: errors.New("connection refused")}})
	// One server read, on configuration 2; the other could not be read.
	partly := Agree([]apiservers.Identity{id("a"), id("b")}, []apiservers.Report{report("a", c2, t0)}, []Failure{{Endpoint: "https://b", Err: errors.New("timeout")}})
	now := t0.Add(10 * time.Minute)
	done := &migrationv1alpha1.StorageEncryption{ConfigHash: c2, RewrittenConfigHash: c2, RewrittenTime: ptr(metav1.NewTime(t0.Add(5 * time.Minute))), RewrittenBy: "secrets-x"}
	done.Message = rewrittenMessage("secrets", done)
	for _, tc := range []struct {
		name       string
		agreement  Agreement
		state      *migrationv1alpha1.StorageState
		migrations []migrationv1alpha1.StorageVersionMigration
		// want
		create    bool
		delete    []string
		rewritten bool
		requeue   time.Duration
		noStatus  bool
		recorded  string // status.rewrittenConfigHash
		message   string // substring of status.message
	}{{
		name: "first sight: re-encrypt", agreement: agreed,
		create: true, message: "Re-encrypting every object under configuration sha256:c2",
	}, {
		name: "servers disagree: nothing starts, svm's running one stops", agreement: split,
		migrations: []migrationv1alpha1.StorageVersionMigration{migration("secrets-old", c1, t0.Add(-time.Hour))},
		delete:     []string{"secrets-old"}, message: "Waiting: API servers have loaded different encryption configurations",
	}, {
		name: "a server not read, svm's running one under the configuration of those read: it goes on", agreement: partly,
		migrations: []migrationv1alpha1.StorageVersionMigration{migration("secrets-1", c2, t0.Add(time.Minute))},
		message:    "re-encryption secrets-1 (configuration sha256:c2) goes on",
	}, {
		name: "a server not read, svm's running one under another configuration than one read: it stops", agreement: partly,
		migrations: []migrationv1alpha1.StorageVersionMigration{migration("secrets-old", c1, t0.Add(-time.Hour))},
		delete:     []string{"secrets-old"}, message: "Waiting: the metrics of https://b could not be read",
	}, {
		name: "running under the agreed configuration: wait for it", agreement: agreed,
		migrations: []migrationv1alpha1.StorageVersionMigration{migration("secrets-1", c2, t0.Add(time.Minute))},
		message:    "migration secrets-1",
	}, {
		name: "running under a superseded configuration: stop it, start anew", agreement: agreed,
		migrations: []migrationv1alpha1.StorageVersionMigration{migration("secrets-old", c1, t0.Add(-time.Hour))},
		delete:     []string{"secrets-old"}, create: true,
	}, {
		name: "succeeded: record it", agreement: agreed,
		migrations: []migrationv1alpha1.StorageVersionMigration{migration("secrets-1", c2, t0.Add(time.Minute), succeeded(t0.Add(3*time.Minute)))},
		rewritten:  true, recorded: c2, message: "no longer need keys the configuration only reads with",
	}, {
		name: "a success from before the last server loaded the configuration proves nothing", agreement: agreed,
		migrations: []migrationv1alpha1.StorageVersionMigration{migration("secrets-0", c2, t0.Add(-time.Minute), succeeded(t0.Add(time.Minute)))},
		create:     true,
	}, {
		name:       "creation times are kept to the second: one made in the second the last server loaded the configuration counts",
		agreement:  Agree(nil, []apiservers.Report{report("a", c2, t0.Add(500*time.Millisecond))}, nil),
		migrations: []migrationv1alpha1.StorageVersionMigration{migration("secrets-1", c2, t0, succeeded(t0.Add(3*time.Minute)))},
		rewritten:  true, recorded: c2,
	}, {
		name:       "one made the second before proves nothing",
		agreement:  Agree(nil, []apiservers.Report{report("a", c2, t0.Add(500*time.Millisecond))}, nil),
		migrations: []migrationv1alpha1.StorageVersionMigration{migration("secrets-0", c2, t0.Add(-time.Second), succeeded(t0.Add(3*time.Minute)))},
		create:     true,
	}, {
		name: "a user's migration made since every server loaded the configuration counts too", agreement: agreed,
		migrations: []migrationv1alpha1.StorageVersionMigration{users("users", t0.Add(time.Minute), succeeded(t0.Add(2*time.Minute)))},
		rewritten:  true, recorded: c2,
	}, {
		name: "the trigger's migration that skipped objects written since a storage change proves nothing", agreement: agreed,
		migrations: []migrationv1alpha1.StorageVersionMigration{func() migrationv1alpha1.StorageVersionMigration {
			m := users("secrets-abcde", t0.Add(time.Minute), succeeded(t0.Add(2*time.Minute)))
			m.Status.Progress.WrittenSinceChange = 3
			return m
		}()},
		create: true,
	}, {
		name: "a user's migration made before proves nothing", agreement: agreed,
		migrations: []migrationv1alpha1.StorageVersionMigration{users("users", t0.Add(-time.Minute), succeeded(t0.Add(2*time.Minute)))},
		create:     true,
	}, {
		name: "the trigger's migration is running: wait for it rather than start another", agreement: agreed,
		migrations: []migrationv1alpha1.StorageVersionMigration{users("secrets-abcde", t0.Add(time.Minute))},
		message:    "migration secrets-abcde",
	}, {
		name: "a user's failures do not hold a re-encryption back", agreement: agreed,
		migrations: []migrationv1alpha1.StorageVersionMigration{users("users", t0.Add(time.Minute), failedAt(t0.Add(9*time.Minute)))},
		create:     true,
	}, {
		name: "recorded and current: nothing to do, nothing to write", agreement: agreed, state: state(done),
		noStatus: true,
	}, {
		name: "recorded under an older configuration: re-encrypt", agreement: agreed,
		state:  state(&migrationv1alpha1.StorageEncryption{ConfigHash: c1, RewrittenConfigHash: c1, RewrittenBy: "secrets-0"}),
		create: true, recorded: c1,
	}, {
		name: "failed: retry after the backoff", agreement: agreed,
		migrations: []migrationv1alpha1.StorageVersionMigration{
			migration("secrets-1", c2, t0.Add(time.Minute), failedAt(t0.Add(2*time.Minute))),
			migration("secrets-2", c2, t0.Add(3*time.Minute), failedAt(t0.Add(9*time.Minute))),
		},
		requeue: 2*time.Minute - time.Minute, message: "failed 2 time(s)",
	}, {
		name: "failed long ago: retry now", agreement: agreed,
		migrations: []migrationv1alpha1.StorageVersionMigration{migration("secrets-1", c2, t0.Add(time.Minute), failedAt(t0.Add(2*time.Minute)))},
		create:     true,
	}, {
		name: "no encryption and no state: nothing written", agreement: none,
		noStatus: true,
	}, {
		name: "a server not read, none encrypting, nothing recorded: nothing written", agreement: unread,
		noStatus: true,
	}, {
		name: "a server not read after a record: waiting", agreement: unread, state: state(done),
		recorded: c2, message: "Waiting: the metrics of https://b could not be read",
	}, {
		name: "encryption turned off: the record stays, the message says so", agreement: none, state: state(done),
		recorded: c2, message: "objects are written unencrypted",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(Input{Now: now, Resource: "secrets", Agreement: tc.agreement, State: tc.state, Migrations: tc.migrations, RetryBase: time.Minute, RetryMax: time.Hour})
			if d.CreateMigration != tc.create || d.Rewritten != tc.rewritten || d.RequeueAfter != tc.requeue {
				t.Errorf("create %v, rewritten %v, requeue %s; want %v, %v, %s", d.CreateMigration, d.Rewritten, d.RequeueAfter, tc.create, tc.rewritten, tc.requeue)
			}
			if diff := cmp.Diff(tc.delete, d.DeleteMigrations); diff != "" {
				t.Errorf("delete (-want +got):\n%s", diff)
			}
			if tc.noStatus {
				if d.Status != nil {
					t.Errorf("status %+v, want none written", d.Status)
				}
				return
			}
			if d.Status == nil {
				t.Fatal("no status written")
			}
			if d.Status.RewrittenConfigHash != tc.recorded {
				t.Errorf("rewrittenConfigHash %q, want %q", d.Status.RewrittenConfigHash, tc.recorded)
			}
			if !strings.Contains(d.Status.Message, tc.message) {
				t.Errorf("message %q, want it to say %q", d.Status.Message, tc.message)
			}
			if tc.agreement.Encrypting() && d.Status.ConfigHash != tc.agreement.ConfigHash {
				t.Errorf("configHash %q, want %q", d.Status.ConfigHash, tc.agreement.ConfigHash)
			}
		})
	}
}

func TestCurrent(t *testing.T) {
	agreed := Agree(nil, []apiservers.Report{report("a", c2, t0)}, nil)
	if !Current(agreed, &migrationv1alpha1.StorageEncryption{RewrittenConfigHash: c2}) {
		t.Error("rewritten under the agreed configuration: not current")
	}
	if Current(agreed, &migrationv1alpha1.StorageEncryption{RewrittenConfigHash: c1}) || Current(agreed, nil) {
		t.Error("rewritten under another configuration, or never: current")
	}
	split := Agree(nil, []apiservers.Report{report("a", c2, t0), report("b", c1, t0)}, nil)
	if Current(split, &migrationv1alpha1.StorageEncryption{RewrittenConfigHash: c2}) {
		t.Error("current while the servers disagree")
	}
}

func ptr[T any](v T) *T { return &v }
