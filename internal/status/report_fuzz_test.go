package status

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/apiservers"
	"github.com/svm-project/svm/internal/rotation"
	"github.com/svm-project/svm/test/golden"
)

// fuzzInput reads an Input for Build from fuzz bytes. Numbers come from
// the whole int64 range when wide is set (anyone who may write a status
// may write any number), and from what a real cluster could hold
// otherwise; times are whole seconds, as the API stores them.
type fuzzInput struct {
	data []byte
	wide bool
}

func (f *fuzzInput) byte() byte {
	if len(f.data) == 0 {
		return 0
	}
	b := f.data[0]
	f.data = f.data[1:]
	return b
}

func (f *fuzzInput) pick(n int) int { return int(f.byte()) % n }

func (f *fuzzInput) count() int64 {
	var buf [8]byte
	for i := range buf {
		buf[i] = f.byte()
	}
	v := int64(binary.LittleEndian.Uint64(buf[:]))
	if f.wide {
		return v
	}
	// Up to 2^32 objects: far more than etcd can hold.
	return int64(uint64(v) % (1 << 32))
}

// offset is a time around now: up to about a year before or a week after
// (clocks disagree), or anywhere within 68 years when wide.
func (f *fuzzInput) offset() time.Duration {
	var buf [4]byte
	for i := range buf {
		buf[i] = f.byte()
	}
	s := int64(int32(binary.LittleEndian.Uint32(buf[:])))
	if !f.wide {
		s = s%(366*24*3600) - 7*24*3600*int64(f.pick(2))
		s = -s
	}
	return time.Duration(s) * time.Second
}

func (f *fuzzInput) time() metav1.Time { return metav1.NewTime(now.Add(f.offset())) }

func (f *fuzzInput) timePtr() *metav1.Time {
	if f.pick(3) == 0 {
		return nil
	}
	t := f.time()
	return &t
}

var (
	fuzzNames    = []string{"widgets", "secrets-4hq9d", "", "a-very-long-name-of-a-migration-that-goes-on-and-on-and-on-and-on"}
	fuzzReasons  = []string{"", "Started", "Retrying", "Forbidden", "ObjectsFailed", "AllObjectsRewritten"}
	fuzzMessages = []string{"", "list widgets: forbidden", "line one\nline two\twith a tab", strings.Repeat("long ", 400), "ünïcödé ✓ \u2028 \v\f\r"}
	fuzzHashes   = []string{"", migrationv1alpha1.UnknownStorageVersionHash, "xPOwRZ+Yhw8=", "8aSe+NMegvE="}
	fuzzStatuses = []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}
	fuzzTypes    = []migrationv1alpha1.MigrationConditionType{migrationv1alpha1.MigrationRunning, migrationv1alpha1.MigrationSucceeded, migrationv1alpha1.MigrationFailed}
	fuzzConfigs  = []string{"", "sha256:c1", "sha256:1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809", "not\na hash\twith spaces"}
	fuzzServers  = []string{"apiserver-ktcmg4mklakbkvqzu5y4lbd6ny", "apiserver-w3vfbx7q2hzn5oyd6kjc4tmra4", "", "a-very-long-name-of-an-api-server-that-goes-on-and-on-and-on-and-on"}
)

func (f *fuzzInput) input(extra string) Input {
	in := Input{Now: now, SVMServed: f.pick(4) != 0, InTreeServed: f.pick(2) == 0}
	messages := append(append([]string{}, fuzzMessages...), strings.ToValidUTF8(extra, "?"))
	for range f.pick(6) {
		m := migrationv1alpha1.StorageVersionMigration{
			ObjectMeta: metav1.ObjectMeta{Name: fuzzNames[f.pick(len(fuzzNames))], CreationTimestamp: f.time()},
			Spec:       migrationv1alpha1.StorageVersionMigrationSpec{Resource: migrationv1alpha1.GroupVersionResource{Group: []string{"", "example.com"}[f.pick(2)], Version: "v1", Resource: "widgets"}},
		}
		for range f.pick(4) {
			m.Status.Conditions = append(m.Status.Conditions, migrationv1alpha1.MigrationCondition{
				Type: fuzzTypes[f.pick(3)], Status: fuzzStatuses[f.pick(3)],
				Reason: fuzzReasons[f.pick(len(fuzzReasons))], Message: messages[f.pick(len(messages))],
			})
		}
		p := &m.Status.Progress
		p.Listed, p.Restored, p.AlreadyCurrent, p.WrittenSinceStart, p.Gone, p.Failed = f.count(), f.count(), f.count(), f.count(), f.count(), f.count()
		if f.pick(2) == 0 {
			r := f.count()
			p.RemainingEstimate = &r
		}
		m.Status.StartTime, m.Status.CompletionTime = f.timePtr(), f.timePtr()
		in.Migrations = append(in.Migrations, m)
	}
	for range f.pick(3) {
		m := storagemigrationv1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: fuzzNames[f.pick(len(fuzzNames))], CreationTimestamp: f.time()}}
		for range f.pick(3) {
			m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{
				Type: string(fuzzTypes[f.pick(3)]), Status: metav1.ConditionStatus(fuzzStatuses[f.pick(3)]), Message: messages[f.pick(len(messages))],
			})
		}
		in.InTreeMigrations = append(in.InTreeMigrations, m)
	}
	for range f.pick(4) {
		s := migrationv1alpha1.StorageState{ObjectMeta: metav1.ObjectMeta{Name: fuzzNames[f.pick(len(fuzzNames))]}}
		s.Status.CurrentStorageVersionHash = fuzzHashes[f.pick(len(fuzzHashes))]
		for range f.pick(4) {
			s.Status.PersistedStorageVersionHashes = append(s.Status.PersistedStorageVersionHashes, fuzzHashes[f.pick(len(fuzzHashes))])
		}
		if f.pick(2) == 0 {
			s.Status.LastHeartbeatTime = f.time()
		}
		if f.pick(3) == 1 {
			s.Status.Encryption = &migrationv1alpha1.StorageEncryption{
				ConfigHash: fuzzConfigs[f.pick(len(fuzzConfigs))], RewrittenConfigHash: fuzzConfigs[f.pick(len(fuzzConfigs))],
				RewrittenTime: f.timePtr(), RewrittenBy: fuzzNames[f.pick(len(fuzzNames))], Message: messages[f.pick(len(messages))],
			}
		}
		in.StorageStates = append(in.StorageStates, s)
	}
	// What the API servers reported, put together as svm controller puts
	// it: leases, reports (some naming no server) and failures.
	if f.pick(3) != 0 {
		var ids []apiservers.Identity
		var reports []apiservers.Report
		var failures []rotation.Failure
		for range f.pick(5) {
			name := fuzzServers[f.pick(len(fuzzServers))]
			endpoint := "https://" + name + ":6443"
			kind := f.pick(4)
			if kind != 1 {
				ids = append(ids, apiservers.Identity{ID: name, IDHash: apiservers.IDHash(name)})
			}
			switch kind {
			case 1, 2:
				r := apiservers.Report{Endpoint: endpoint, IDHash: apiservers.IDHash(name), ConfigHash: fuzzConfigs[f.pick(len(fuzzConfigs))]}
				if r.ConfigHash == "" && f.pick(2) == 0 {
					r.IDHash = "" // no configuration, no reload series: it does not name itself
				}
				if f.pick(3) != 0 {
					r.LoadedAt = f.time().Time
				}
				if f.pick(3) == 0 {
					r.ReloadFailedAt = f.time().Time
				}
				reports = append(reports, r)
			case 3:
				failures = append(failures, rotation.Failure{Endpoint: endpoint, Err: errors.New(messages[f.pick(len(messages))])})
			}
		}
		a := rotation.Agree(ids, reports, failures)
		in.Encryption = &a
		if f.pick(3) == 1 {
			in.EncryptionError = messages[f.pick(len(messages))]
		}
	}
	return in
}

// stuckSeed is a migration stuck an hour after its first object, with
// 2^32-1 to go: a time left far beyond what a time.Duration holds.
func stuckSeed() []byte {
	var stuck []byte
	stuck = append(stuck, 1, 1, 1)                               // svm's API served, no in-tree API; one migration
	stuck = append(stuck, 0, 0x58, 0x02, 0, 0, 0, 1)             // "widgets", created 10 minutes ago, in example.com
	stuck = append(stuck, 1, 0, 0, 1, 0)                         // one condition: Running=True, Started
	stuck = append(stuck, 1, 0, 0, 0, 0, 0, 0, 0)                // listed 1
	stuck = append(stuck, 1, 0, 0, 0, 0, 0, 0, 0)                // restored 1
	stuck = append(stuck, make([]byte, 32)...)                   // already current, written since the start, gone and failed 0
	stuck = append(stuck, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0) // an estimate: 2^32-1 remaining
	stuck = append(stuck, 1, 0x10, 0x0e, 0, 0, 0, 0)             // started an hour ago, not completed
	return stuck
}

// encryptionSeed is two API servers that have loaded the same
// configuration, one of them after a failed reload, and a resource
// rewritten under it: the section that lets go of the keys.
func encryptionSeed() []byte {
	hourAgo := []byte{0x10, 0x0e, 0, 0, 0}
	var seed []byte
	seed = append(seed, 1, 1, 0, 0)    // svm's API served, no in-tree API; no migrations, no in-tree ones
	seed = append(seed, 1, 1, 2, 0, 1) // one storage state, "secrets-4hq9d", current hash 2, nothing persisted, no heartbeat
	seed = append(seed, 1, 2, 2, 1)    // status.encryption: configuration 2, rewritten under it,
	seed = append(seed, hourAgo...)    // an hour ago,
	seed = append(seed, 1, 1)          // by "secrets-4hq9d", with a message
	seed = append(seed, 1, 2)          // an agreement of two servers:
	seed = append(seed, 0, 2, 2, 1)    // the first has a lease and a report of configuration 2, loaded
	seed = append(seed, hourAgo...)    // an hour ago,
	seed = append(seed, 1)             // with no failed reload;
	seed = append(seed, 1, 2, 2, 1)    // the second too,
	seed = append(seed, hourAgo...)    // loaded an hour ago,
	seed = append(seed, 0)             // and a reload that failed
	seed = append(seed, hourAgo...)    // an hour ago;
	return append(seed, 0)             // the leases were listed
}

// The seed means what its comments say.
func TestStatusEncryptionSeed(t *testing.T) {
	in := (&fuzzInput{data: encryptionSeed()}).input("")
	r := Build(in)
	if r.Encryption == nil || !r.Encryption.AllRewritten || len(r.Encryption.Servers) != 2 || r.Encryption.Servers[1].ReloadFailedAt == nil {
		t.Fatalf("the encryption seed builds %+v from %+v", r.Encryption, in)
	}
}

// FuzzBuild checks what `svm status` shows for any objects the server may
// hold: Build never panics nor changes the objects it is given, keeps
// every migration and state and orders them as documented, and every
// output format renders it (the JSON reads back the same, the table keeps
// one line per row). For what a real cluster could hold it also checks
// the numbers: no negative rate, total or time left, and a time left the
// table can show.
func FuzzBuild(f *testing.F) {
	f.Add([]byte{}, "", false)
	f.Add([]byte{1, 1, 5, 0, 10, 0, 0, 0, 3, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9}, "x", false)
	f.Add(bytes.Repeat([]byte{7, 3, 200, 1}, 40), "retrying\nafter a conflict", false)
	f.Add(bytes.Repeat([]byte{255, 1, 0, 128}, 60), "", true)
	f.Add(stuckSeed(), "", false)
	f.Add(encryptionSeed(), "", false)
	f.Fuzz(func(t *testing.T, data []byte, extra string, wide bool) {
		in := (&fuzzInput{data: data, wide: wide}).input(extra)
		// Cached objects must never be changed: compare against a copy.
		saved := Input{Now: in.Now, SVMServed: in.SVMServed, InTreeServed: in.InTreeServed, EncryptionError: in.EncryptionError}
		if in.Encryption != nil {
			a := *in.Encryption
			a.Servers = slices.Clone(a.Servers)
			saved.Encryption = &a
		}
		for i := range in.Migrations {
			saved.Migrations = append(saved.Migrations, *in.Migrations[i].DeepCopy())
		}
		for i := range in.InTreeMigrations {
			saved.InTreeMigrations = append(saved.InTreeMigrations, *in.InTreeMigrations[i].DeepCopy())
		}
		for i := range in.StorageStates {
			saved.StorageStates = append(saved.StorageStates, *in.StorageStates[i].DeepCopy())
		}
		r := Build(in)
		if diff := cmp.Diff(saved, in); diff != "" {
			t.Fatalf("Build changed its input (-before +after):\n%s", diff)
		}

		wantMigrations, wantStates := 0, 0
		if in.SVMServed {
			wantMigrations, wantStates = len(in.Migrations), len(in.StorageStates)
		}
		if in.InTreeServed {
			wantMigrations += len(in.InTreeMigrations)
		}
		if len(r.Migrations) != wantMigrations || len(r.StorageStates) != wantStates {
			t.Fatalf("Build kept %d migrations and %d states of %d and %d", len(r.Migrations), len(r.StorageStates), wantMigrations, wantStates)
		}
		for i, m := range r.Migrations {
			if _, ok := stateOrder[m.State]; !ok {
				t.Errorf("migration %q has state %q", m.Name, m.State)
			}
			if i > 0 {
				prev := r.Migrations[i-1]
				if stateOrder[prev.State] > stateOrder[m.State] ||
					stateOrder[prev.State] == stateOrder[m.State] && prev.CreationTimestamp.After(m.CreationTimestamp.Time) {
					t.Errorf("%s (%s) is listed before %s (%s)", prev.Name, prev.State, m.Name, m.State)
				}
			}
			if (m.Source == SourceSVM) != (m.Progress != nil) {
				t.Errorf("migration %q from %s has progress %v", m.Name, m.Source, m.Progress)
			}
			if m.ETASeconds != nil && m.State != StateRunning {
				t.Errorf("migration %q is %s but has a time left", m.Name, m.State)
			}
			if m.ObjectsPerSecond != nil && (math.IsNaN(*m.ObjectsPerSecond) || math.IsInf(*m.ObjectsPerSecond, 0)) {
				t.Errorf("migration %q has rate %v", m.Name, *m.ObjectsPerSecond)
			}
			if wide {
				continue
			}
			if m.ObjectsPerSecond != nil && *m.ObjectsPerSecond < 0 {
				t.Errorf("migration %q has a negative rate %v", m.Name, *m.ObjectsPerSecond)
			}
			if m.ETASeconds != nil && *m.ETASeconds < 0 {
				t.Errorf("migration %q has a negative time left %d", m.Name, *m.ETASeconds)
			}
			if m.ETASeconds != nil {
				// The table shows the time left, up to the longest a
				// time.Duration holds (292 years).
				longest := int64(math.MaxInt64 / int64(time.Second))
				want := duration.HumanDuration(time.Duration(min(*m.ETASeconds, longest)) * time.Second)
				if got := etaCell(m.ETASeconds); got != want {
					t.Errorf("migration %q: time left %d seconds shows as %q, want %q", m.Name, *m.ETASeconds, got, want)
				}
			}
			if p := m.Progress; p != nil && (p.Total < p.Listed || p.TotalKnown != (p.RemainingEstimate != nil || m.State == StateSucceeded || m.State == StateFailed)) {
				t.Errorf("migration %q: progress %+v in state %s", m.Name, *p, m.State)
			}
		}
		for _, s := range r.StorageStates {
			if s.Migrated && (len(s.PersistedStorageVersionHashes) != 1 || s.PersistedStorageVersionHashes[0] != s.CurrentStorageVersionHash ||
				s.CurrentStorageVersionHash == "" || s.CurrentStorageVersionHash == migrationv1alpha1.UnknownStorageVersionHash) {
				t.Errorf("storage state %q is migrated with current %q and persisted %v", s.Name, s.CurrentStorageVersionHash, s.PersistedStorageVersionHashes)
			}
		}
		checkEncryption(t, in, r)
		if !strings.HasPrefix(Summary(r), "no migrations") && !strings.HasPrefix(Summary(r), strings.Fields(Summary(r))[0]+" migration") {
			t.Errorf("summary %q", Summary(r))
		}

		var js, yml, table bytes.Buffer
		if err := WriteJSON(&js, r); err != nil {
			t.Fatalf("WriteJSON: %v", err)
		}
		if err := WriteYAML(&yml, r); err != nil {
			t.Fatalf("WriteYAML: %v", err)
		}
		if err := WriteTable(&table, r); err != nil {
			t.Fatalf("WriteTable: %v", err)
		}
		golden.DecodesJSON(t, js.Bytes(), r)
		// One line per row: a header and the rows, or a "No ..." line, for
		// each table, and a blank line between them. The encryption
		// section, if any, comes last.
		tables := table.String()
		if r.Encryption != nil {
			var section strings.Builder
			writeEncryption(&section, r.Encryption, r.Time.Time, false)
			checkEncryptionTable(t, section.String(), r.Encryption)
			var found bool
			if tables, found = strings.CutSuffix(tables, "\n"+section.String()); !found {
				t.Fatalf("the table does not end in the encryption section:\n%s", table.String())
			}
		}
		want := max(1, len(r.Migrations)+min(1, len(r.Migrations)))
		if r.SVMAPIServed {
			want += 1 + max(1, len(r.StorageStates)+min(1, len(r.StorageStates)))
		}
		if got := strings.Count(tables, "\n"); got != want {
			t.Errorf("the table has %d lines, want %d:\n%s", got, want, table.String())
		}
	})
}

// checkEncryption checks the encryption section against its input: it
// shows when an API server reported a configuration or a StorageState
// records a re-encryption, and only then; each resource is current as
// rotation.Current says; and it lets go of the keys only when every
// resource is current under the configuration every server has loaded,
// every server is known, and something was rewritten.
func checkEncryption(t *testing.T, in Input, r *Report) {
	t.Helper()
	recorded := 0
	if in.SVMServed {
		for _, s := range in.StorageStates {
			if s.Status.Encryption != nil {
				recorded++
			}
		}
	}
	loaded := in.Encryption != nil && slices.ContainsFunc(in.Encryption.Servers, func(s rotation.Server) bool { return s.ConfigHash != "" })
	e := r.Encryption
	if (e != nil) != (loaded || recorded > 0) {
		t.Fatalf("encryption section %v with a configuration loaded %v and %d re-encryptions recorded", e != nil, loaded, recorded)
	}
	if e == nil {
		return
	}
	if len(e.Resources) != recorded || e.Verdict == "" {
		t.Errorf("%d resources of %d recorded, verdict %q", len(e.Resources), recorded, e.Verdict)
	}
	for _, res := range e.Resources {
		i := slices.IndexFunc(in.StorageStates, func(s migrationv1alpha1.StorageState) bool {
			return s.Name == res.Name && s.Status.Encryption != nil && s.Status.Encryption.RewrittenConfigHash == res.RewrittenConfigHash
		})
		if i < 0 {
			t.Errorf("resource %q is no StorageState's", res.Name)
			continue
		}
		if want := in.Encryption != nil && rotation.Current(*in.Encryption, in.StorageStates[i].Status.Encryption); res.Current != want {
			t.Errorf("resource %q: current %v, rotation.Current says %v", res.Name, res.Current, want)
		}
	}
	allCurrent := !slices.ContainsFunc(e.Resources, func(res EncryptedResource) bool { return !res.Current })
	if e.AllRewritten != (in.Encryption != nil && in.Encryption.Encrypting() && in.EncryptionError == "" && recorded > 0 && allCurrent) {
		t.Errorf("allRewritten %v: agreement %+v, error %q, %d recorded, all current %v", e.AllRewritten, in.Encryption, in.EncryptionError, recorded, allCurrent)
	}
	if lets := strings.Contains(e.Verdict, "no object written through the API needs"); lets && !e.AllRewritten && !strings.Contains(e.Verdict, "if none does") {
		t.Errorf("the verdict lets go of a key it cannot: %q", e.Verdict)
	}
}

// checkEncryptionTable checks the section's table: its title, one line
// per API server, and the verdict at its end, whole, wrapped between
// words within TableWidth.
func checkEncryptionTable(t *testing.T, section string, e *Encryption) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(section, "\n"), "\n")
	if lines[0] != "ENCRYPTION AT REST" {
		t.Fatalf("the section starts with %q", lines[0])
	}
	if len(e.Servers) > 0 && (len(lines) < 2+len(e.Servers) || !strings.HasPrefix(lines[1], "API SERVER")) {
		t.Fatalf("the section does not list %d API servers:\n%s", len(e.Servers), section)
	}
	verdict := oneLine(e.Verdict)
	var tail []string
	for i := len(lines) - 1; i > 0 && len(strings.Join(tail, " ")) < len(verdict); i-- {
		line := lines[i]
		if utf8.RuneCountInString(line) > TableWidth && strings.Contains(line, " ") {
			t.Errorf("verdict line is wider than %d: %q", TableWidth, line)
		}
		tail = append([]string{line}, tail...)
	}
	if got := strings.Join(tail, " "); got != verdict {
		t.Errorf("the section ends in\n%s\nwant the verdict %q", got, verdict)
	}
}
