package rotation

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/apiservers"
)

// Key ID hashes as kube-apiserver labels them (of key IDs "A" and "B").
const (
	keyA = "sha256:559aead08264d5795d3909718cdd05abd49572e84fe55590eef31a88a08fdffd"
	keyB = "sha256:df7e70e5021544f4834bbee64a9e3789febc4be81470df629cad6ddb03320a5c"
)

// kmsReport is server name's report on configuration config, loaded at
// t0, with its keys; checkOK says its kms-providers check answered ok.
func kmsReport(name, config string, checkOK bool, keys ...apiservers.KMSKey) apiservers.Report {
	r := report(name, config, t0)
	r.KMS, r.KMSChecked = keys, true
	if !checkOK {
		r.KMSCheckProblem = "https://" + name + "/readyz/kms-providers: forbidden: asking it needs get on the non-resource URL /readyz/kms-providers"
	}
	return r
}

// onKey is provider kms1 on key, last answered at statusAt (minutes after
// t0); other, if not zero, is when it last answered another key, and
// wrote when it last wrote under key (-1 for never).
func onKey(key string, statusAt, other, wrote int) apiservers.KMSKey {
	k := apiservers.KMSKey{Provider: "kms1", KeyIDHash: key, StatusAt: t0.Add(time.Duration(statusAt) * time.Minute)}
	if other != 0 {
		k.OtherStatusAt = t0.Add(time.Duration(other) * time.Minute)
	}
	if wrote >= 0 {
		k.WroteAt = t0.Add(time.Duration(wrote) * time.Minute)
	}
	return k
}

func kms(pairs ...string) []migrationv1alpha1.KMSKey {
	var out []migrationv1alpha1.KMSKey
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, migrationv1alpha1.KMSKey{Provider: pairs[i], KeyIDHash: pairs[i+1]})
	}
	return out
}

func TestAgreeKMS(t *testing.T) {
	ids := []apiservers.Identity{id("a"), id("b")}
	for _, tc := range []struct {
		name    string
		reports []apiservers.Report
		keys    []migrationv1alpha1.KMSKey
		since   time.Time
		waiting []string // substrings of Waiting; none when agreed
	}{{
		name: "first sight: one key, nothing written, the checks ok",
		reports: []apiservers.Report{
			kmsReport("a", c2, true, onKey(keyA, 2, 0, -1)),
			kmsReport("b", c2, true, onKey(keyA, 3, 0, -1)),
		},
		keys: kms("kms1", keyA), since: t0.Add(3 * time.Minute),
	}, {
		name: "first sight: nothing written and the check not allowed: not seen writing",
		reports: []apiservers.Report{
			kmsReport("a", c2, true, onKey(keyA, 2, 0, -1)),
			kmsReport("b", c2, false, onKey(keyA, 3, 0, -1)),
		},
		waiting: []string{"API server b's KMS v2 provider kms1 answers key " + keyA + ", but the server is not seen writing under it", "needs get on the non-resource URL /readyz/kms-providers"},
	}, {
		name: "rotation agreed: one seen writing under the new key, the other's check ok",
		reports: []apiservers.Report{
			kmsReport("a", c2, false, onKey(keyB, 10, 9, 11)),
			kmsReport("b", c2, true, onKey(keyB, 10, 9, -1)),
		},
		keys: kms("kms1", keyB), since: t0.Add(10 * time.Minute),
	}, {
		name: "one server behind: its plugin still answers the old key",
		reports: []apiservers.Report{
			kmsReport("a", c2, true, onKey(keyB, 10, 9, 11)),
			kmsReport("b", c2, true, onKey(keyA, 10, 0, 10)),
		},
		waiting: []string{"KMS v2 provider kms1 answers different keys", "API server a answers key " + keyB, "API server b answers key " + keyA},
	}, {
		name: "one server unconfirmed: the new key answered, written under before it, the check failing",
		reports: []apiservers.Report{
			kmsReport("a", c2, true, onKey(keyB, 10, 9, 11)),
			kmsReport("b", c2, false, onKey(keyB, 10, 9, 8)),
		},
		waiting: []string{"API server b's KMS v2 provider kms1 answers key " + keyB, "not seen writing under it"},
	}, {
		name: "a key that comes back (A, B, A): written under A since B's last answer",
		reports: []apiservers.Report{
			kmsReport("a", c2, false, onKey(keyA, 20, 15, 21)),
			kmsReport("b", c2, false, onKey(keyA, 20, 15, 16)),
		},
		keys: kms("kms1", keyA), since: t0.Add(20 * time.Minute),
	}, {
		name: "a key that comes back (A, B, A): a write under A from before B proves nothing",
		reports: []apiservers.Report{
			kmsReport("a", c2, false, onKey(keyA, 20, 15, 21)),
			kmsReport("b", c2, false, onKey(keyA, 20, 15, 5)),
		},
		waiting: []string{"API server b's KMS v2 provider kms1 answers key " + keyA + ", but the server is not seen writing under it"},
	}, {
		name: "a server restarted: no key yet, while the other has one",
		reports: []apiservers.Report{
			kmsReport("a", c2, true, onKey(keyB, 10, 9, 11)),
			report("b", c2, t0.Add(12*time.Minute)),
		},
		waiting: []string{"API server b reports no key for KMS v2 provider kms1 (it restarted, or its /metrics were reset)"},
	}, {
		name: "KMS and aescbc in one configuration: two KMS providers, by name; since the later load",
		reports: []apiservers.Report{
			kmsReport("a", c2, true, onKey(keyB, 10, 9, 11), apiservers.KMSKey{Provider: "backup", KeyIDHash: keyA, StatusAt: t0.Add(4 * time.Minute)}),
			func() apiservers.Report {
				r := kmsReport("b", c2, true, onKey(keyB, 10, 9, -1), apiservers.KMSKey{Provider: "backup", KeyIDHash: keyA, StatusAt: t0.Add(4 * time.Minute)})
				r.LoadedAt = t0.Add(30 * time.Minute)
				return r
			}(),
		},
		keys: kms("backup", keyA, "kms1", keyB), since: t0.Add(30 * time.Minute),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			a := Agree(ids, tc.reports, nil)
			if a.Agreed != (len(tc.waiting) == 0) {
				t.Fatalf("agreed %v, waiting %q", a.Agreed, a.Waiting)
			}
			for _, w := range tc.waiting {
				if !strings.Contains(a.Waiting, w) {
					t.Errorf("waiting %q does not say %q", a.Waiting, w)
				}
			}
			if !a.Agreed {
				return
			}
			if diff := cmp.Diff(tc.keys, a.KMSKeys, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("KMS keys (-want +got):\n%s", diff)
			}
			if a.ConfigHash != c2 || !a.Since.Equal(tc.since) {
				t.Errorf("config %q since %s, want %q since %s", a.ConfigHash, a.Since, c2, tc.since)
			}
		})
	}
}

// reencryptionUnder is svm's re-encryption under config and keys.
func reencryptionUnder(name, config string, keys []migrationv1alpha1.KMSKey, created time.Time, conds ...migrationv1alpha1.MigrationCondition) migrationv1alpha1.StorageVersionMigration {
	m := migration(name, config, created, conds...)
	if len(keys) > 0 {
		m.Annotations[KMSKeysAnnotation] = FormatKMSKeys(keys)
	}
	return m
}

func TestDecideKMS(t *testing.T) {
	ids := []apiservers.Identity{id("a"), id("b")}
	onB := Agree(ids, []apiservers.Report{kmsReport("a", c2, true, onKey(keyB, 10, 9, 11)), kmsReport("b", c2, true, onKey(keyB, 10, 9, -1))}, nil)
	backToA := Agree(ids, []apiservers.Report{kmsReport("a", c2, true, onKey(keyA, 20, 15, 21)), kmsReport("b", c2, true, onKey(keyA, 20, 15, -1))}, nil)
	behind := Agree(ids, []apiservers.Report{kmsReport("a", c2, true, onKey(keyB, 10, 9, 11)), kmsReport("b", c2, true, onKey(keyA, 10, 0, 10))}, nil)
	restarted := Agree(ids, []apiservers.Report{kmsReport("a", c2, true, onKey(keyB, 10, 9, 11)), report("b", c2, t0.Add(12*time.Minute))}, nil)
	// Recorded: every object rewritten under configuration 2 and key A.
	underA := &migrationv1alpha1.StorageEncryption{ConfigHash: c2, KMSKeys: kms("kms1", keyA), RewrittenConfigHash: c2, RewrittenKMSKeys: kms("kms1", keyA), RewrittenBy: "secrets-a"}
	underB := &migrationv1alpha1.StorageEncryption{ConfigHash: c2, KMSKeys: kms("kms1", keyB), RewrittenConfigHash: c2, RewrittenKMSKeys: kms("kms1", keyB), RewrittenBy: "secrets-b"}
	underB.Message = rewrittenMessage("secrets", underB)
	for _, tc := range []struct {
		name       string
		agreement  Agreement
		state      *migrationv1alpha1.StorageState
		migrations []migrationv1alpha1.StorageVersionMigration
		create     bool
		delete     []string
		rewritten  bool
		noStatus   bool
		recorded   []migrationv1alpha1.KMSKey // status.rewrittenKMSKeys
		message    string
	}{{
		name: "first sight: re-encrypt under the configuration and the key", agreement: onB,
		create: true, message: "Re-encrypting every object under configuration sha256:c2 with KMS v2 keys kms1=" + keyB,
	}, {
		name: "rotation agreed: the record is under the old key, re-encrypt", agreement: onB, state: state(underA),
		create: true, recorded: kms("kms1", keyA),
	}, {
		name: "rotation agreed: svm's re-encryption under the old key stops", agreement: onB, state: state(underA),
		migrations: []migrationv1alpha1.StorageVersionMigration{reencryptionUnder("secrets-old", c2, kms("kms1", keyA), t0.Add(-time.Hour))},
		delete:     []string{"secrets-old"}, create: true, recorded: kms("kms1", keyA),
	}, {
		name: "a re-encryption under the new key made since succeeded: record it", agreement: onB, state: state(underA),
		migrations: []migrationv1alpha1.StorageVersionMigration{reencryptionUnder("secrets-b", c2, kms("kms1", keyB), t0.Add(11*time.Minute), succeeded(t0.Add(12*time.Minute)))},
		rewritten:  true, recorded: kms("kms1", keyB), message: "or KMS v2 keys other than these",
	}, {
		name: "one made before the last server answered the new key proves nothing", agreement: onB, state: state(underA),
		migrations: []migrationv1alpha1.StorageVersionMigration{users("users", t0.Add(9*time.Minute), succeeded(t0.Add(12*time.Minute)))},
		create:     true, recorded: kms("kms1", keyA),
	}, {
		name: "recorded under the agreed key: nothing to do, nothing to write", agreement: onB, state: state(underB),
		noStatus: true,
	}, {
		name: "a key that comes back (A, B, A): recorded under B, re-encrypt under A", agreement: backToA, state: state(underB),
		create: true, recorded: kms("kms1", keyB), message: "with KMS v2 keys kms1=" + keyA,
	}, {
		name: "one server behind: nothing starts; svm's re-encryption under the new key stops, since a server answers the old", agreement: behind, state: state(underA),
		migrations: []migrationv1alpha1.StorageVersionMigration{reencryptionUnder("secrets-b", c2, kms("kms1", keyB), t0.Add(11*time.Minute))},
		delete:     []string{"secrets-b"}, recorded: kms("kms1", keyA), message: "answers different keys",
	}, {
		name: "a server restarted, no key yet: svm's re-encryption under the new key goes on", agreement: restarted, state: state(underA),
		migrations: []migrationv1alpha1.StorageVersionMigration{reencryptionUnder("secrets-b", c2, kms("kms1", keyB), t0.Add(11*time.Minute))},
		recorded:   kms("kms1", keyA), message: "re-encryption secrets-b (configuration sha256:c2 with KMS v2 keys kms1=" + keyB + ") goes on",
	}, {
		name: "recorded under the same configuration before svm read KMS v2 keys: re-encrypt once", agreement: onB,
		state:  state(&migrationv1alpha1.StorageEncryption{ConfigHash: c2, RewrittenConfigHash: c2, RewrittenBy: "secrets-0"}),
		create: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(Input{Now: t0.Add(time.Hour), Resource: "secrets", Agreement: tc.agreement, State: tc.state, Migrations: tc.migrations, RetryBase: time.Minute, RetryMax: time.Hour})
			if d.CreateMigration != tc.create || d.Rewritten != tc.rewritten {
				t.Errorf("create %v, rewritten %v; want %v, %v", d.CreateMigration, d.Rewritten, tc.create, tc.rewritten)
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
			if diff := cmp.Diff(tc.recorded, d.Status.RewrittenKMSKeys, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("rewrittenKMSKeys (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.agreement.KMSKeys, d.Status.KMSKeys, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("kmsKeys (-want +got):\n%s", diff)
			}
			if !strings.Contains(d.Status.Message, tc.message) {
				t.Errorf("message %q, want it to say %q", d.Status.Message, tc.message)
			}
			if got := Current(tc.agreement, d.Status); got != (tc.rewritten || tc.noStatus) {
				t.Errorf("Current = %v", got)
			}
		})
	}
}

func TestKMSKeysAnnotationRoundTrip(t *testing.T) {
	keys := kms("b", keyB, "a", keyA)
	m := reencryptionUnder("x", c2, keys, t0)
	if got, want := m.Annotations[KMSKeysAnnotation], "a="+keyA+",b="+keyB; got != want {
		t.Errorf("annotation %q, want %q", got, want)
	}
	if got, want := mark.Target(&m), target(c2, keys); got != want {
		t.Errorf("target %q, want %q", got, want)
	}
	old := migration("y", c2, t0)
	if got := mark.Target(&old); got != c2 {
		t.Errorf("target of a migration without the annotation %q, want %q", got, c2)
	}
}
