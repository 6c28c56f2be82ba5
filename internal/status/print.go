package status

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/admission"
	"github.com/svm-project/svm/internal/document"
)

// The table aims at TableWidth columns, a wide terminal, while keeping what
// identifies a row. Its truncation rules, in the order they apply:
//
//   - NAME keeps at most maxIDWidth characters and is cut in the middle
//     ("customresourc...k8s.io-8fj2k"): generated names differ at their
//     end. RESOURCE keeps at most maxIDWidth characters too and is cut at
//     its end ("customresourcedefin..."), keeping the resource before its
//     group. While the line would be wider than TableWidth, RESOURCE gives
//     way first, down to minResourceWidth, then NAME, down to minNameWidth:
//     a migration's name usually repeats its resource, and the name is what
//     one types next (kubectl describe).
//   - LAST ERROR gets what is left of TableWidth, and is cut at its end:
//     the start of an error says what failed. The columns before it give
//     way (above) so that it keeps minMessageWidth characters, or fewer
//     when no message is that long; it never gets fewer. So a table whose
//     other columns are very wide (huge counts) can still be wider than
//     TableWidth.
//   - In the storage states table RESOURCE keeps at most
//     stateResourceWidth characters, cut in the middle, and PERSISTED HASHES
//     names the first maxHashes hashes and counts the rest ("a,b (+3)").
//   - Newlines, tabs and runs of spaces in any cell become one space, so
//     every row stays one line and the columns stay aligned.
//   - In the encryption section, API SERVER keeps at most maxIDWidth
//     characters and RESOURCE stateResourceWidth, both cut in the middle;
//     configuration hashes keep their first hashWidth characters
//     ("sha256:1a2b3c4d5e6f..."), as short commit and image digests do;
//     BY gets what is left of TableWidth, down to minNameWidth, cut in
//     the middle. The notes and the verdict under it are wrapped at
//     TableWidth, with full hashes. -o wide keeps full hashes and names.
//
// The full values are in -o json and -o yaml.
const (
	TableWidth         = 120
	maxIDWidth         = 40
	minNameWidth       = 20
	minResourceWidth   = 16
	minMessageWidth    = 20
	stateResourceWidth = 46
	maxHashes          = 2
	columnPadding      = 2
	ellipsis           = "..."
	hashWidth          = len("sha256:") + 12 + len(ellipsis)
)

// WriteTable prints r as two tables, the migrations and then the storage
// states, separated by a blank line. Without svm's API there are no storage
// states and the second table is left out. When the report has an
// encryption section, it follows, after a blank line: the API servers and
// their configurations, the resources svm re-encrypts, and the verdict.
func WriteTable(w io.Writer, r *Report) error {
	return writeTables(w, r, false)
}

// WriteWideTable is WriteTable with a column for each outcome of the
// objects (re-stored, already current, written since the start, gone,
// failed) after MIGRATED, as kubectl's -o wide adds columns. LAST ERROR
// keeps the room it has in the narrow table.
func WriteWideTable(w io.Writer, r *Report) error {
	return writeTables(w, r, true)
}

func writeTables(w io.Writer, r *Report, wide bool) error {
	var b strings.Builder
	writeMigrations(&b, r, wide)
	if r.SVMAPIServed {
		b.WriteString("\n")
		writeStorageStates(&b, r)
	}
	if r.Encryption != nil {
		b.WriteString("\n")
		writeEncryption(&b, r.Encryption, r.Time.Time, wide)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeMigrations(b *strings.Builder, r *Report, wide bool) {
	if len(r.Migrations) == 0 {
		b.WriteString("No migrations found.\n")
		return
	}
	now := r.Time.Time
	header := []string{"NAME", "RESOURCE", "SOURCE", "STATE", "MIGRATED", "RATE", "ETA", "AGE"}
	if wide {
		header = slices.Insert(header, 5, wideColumns...)
	}
	rows := [][]string{header}
	messages := []string{"LAST ERROR"}
	for _, m := range r.Migrations {
		row := []string{
			oneLine(m.Name),
			oneLine(groupResource(m.Group, m.Resource)),
			string(m.Source),
			string(m.State),
			progressCell(m.Progress, m.StartTime != nil),
			rateCell(m.ObjectsPerSecond),
			etaCell(m.ETASeconds),
			age(now, &m.CreationTimestamp),
		}
		if wide {
			row = slices.Insert(row, 5, outcomeCells(m.Progress, m.StartTime != nil)...)
		}
		rows = append(rows, row)
		messages = append(messages, lastError(m))
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for col, cell := range row {
			widths[col] = max(widths[col], utf8.RuneCountInString(cell))
		}
	}
	// RESOURCE (1) and then NAME (0) give way, so that LAST ERROR keeps
	// its minimum within TableWidth.
	widths[0], widths[1] = min(widths[0], maxIDWidth), min(widths[1], maxIDWidth)
	used := func() int {
		sum := 0
		for _, w := range widths {
			sum += w + columnPadding
		}
		return sum
	}
	// Reserve room only for messages there are: a table of successes
	// needs none.
	reserve := 0
	for _, msg := range messages {
		reserve = max(reserve, min(minMessageWidth, utf8.RuneCountInString(msg)))
	}
	width := TableWidth
	if wide {
		// The outcome columns come on top: LAST ERROR keeps its room.
		for col := 5; col < 5+len(wideColumns); col++ {
			width += widths[col] + columnPadding
		}
	}
	if over := used() + reserve - width; over > 0 {
		cut := min(over, max(0, widths[1]-minResourceWidth))
		widths[1] -= cut
		widths[0] -= min(over-cut, max(0, widths[0]-minNameWidth))
	}
	room := max(minMessageWidth, width-used())
	tw := tabwriter.NewWriter(b, 0, 0, columnPadding, ' ', 0)
	for i, row := range rows {
		row[0], row[1] = cutMiddle(row[0], widths[0]), cutEnd(row[1], widths[1])
		fmt.Fprintf(tw, "%s\t%s\n", strings.Join(row, "\t"), cutEnd(messages[i], room))
	}
	_ = tw.Flush()
	writePacing(b, r.Migrations)
	writeRefusals(b, r.Migrations)
	writeEntriesLeft(b, r.Migrations)
}

// writeEntriesLeft says, under the migrations, which left managedFields
// entries naming a version to be pruned: the objects are stored in the
// storage version, but the version cannot be removed from the CRD yet.
func writeEntriesLeft(b *strings.Builder, migrations []Migration) {
	for _, m := range migrations {
		if m.Progress == nil || m.Progress.ManagedFieldsLeft.Total() == 0 {
			continue
		}
		l := m.Progress.ManagedFieldsLeft
		writeWrapped(b, fmt.Sprintf("%s: %d managedFields entries still name a version to be pruned (%s): "+
			"server-side apply on their objects fails once it is removed from the CRD, so neither svm controller nor svm retire prunes it until they are moved",
			m.Name, l.Total(), l))
	}
}

// writeRefusals says, under the migrations, which admission webhooks and
// policies refused svm's writes, and how many objects each left
// unmigrated: what the user has to change, or let svm write through the
// status subresource (spec.throughStatus).
func writeRefusals(b *strings.Builder, migrations []Migration) {
	for _, m := range migrations {
		for _, r := range m.RefusedBy {
			d := admission.Denial{Kind: admission.Kind(r.Kind), Name: r.Name, Binding: r.Binding, Message: oneLine(r.Message)}
			writeWrapped(b, m.Name+": "+d.Refused(r.Objects, r.Subresource))
		}
	}
}

// writePacing says, under the migrations, how adaptive pacing drives each
// running migration of svm's: a sentence per migration, wrapped at
// TableWidth, since its figures need their words (in flight of a window,
// at a knee) to be read right. Under a qps cap it says what the cap
// allows beside the window, since either may be what holds svm back.
func writePacing(b *strings.Builder, migrations []Migration) {
	for _, m := range migrations {
		p := m.Pacing
		if p == nil {
			continue
		}
		knee := "no knee yet: the most writes tried get the best rate"
		if p.KneeWrites > 0 {
			knee = fmt.Sprintf("%d writes in flight get 0.95 of the best rate measured", p.KneeWrites)
		}
		flight := fmt.Sprintf(", %s in flight of a window of %d; writes take %s (smoothed)",
			writes(p.WritesInFlight), p.Window, p.SmoothedLatency.Duration)
		if p.QPS != nil {
			qps := strconv.FormatFloat(p.QPS.AsApproximateFloat64(), 'f', -1, 64)
			flight = fmt.Sprintf(" under --qps %s: %s in flight, of the %d the rate needs at %s a write (smoothed) and a window of %d",
				qps, writes(p.WritesInFlight), p.RateWindow, p.SmoothedLatency.Duration, p.Window)
		}
		writeWrapped(b, fmt.Sprintf("Pacing %s: %d writes/s%s; %s. Last decision %s.",
			oneLine(m.Name), p.WritesPerSecond, flight, knee, cmp.Or(p.LastDecision, "none")))
	}
}

// writes is n writes, in words.
func writes(n int32) string {
	if n == 1 {
		return "1 write"
	}
	return fmt.Sprintf("%d writes", n)
}

func writeStorageStates(b *strings.Builder, r *Report) {
	if len(r.StorageStates) == 0 {
		b.WriteString("No storage states found.\n")
		return
	}
	now := r.Time.Time
	tw := tabwriter.NewWriter(b, 0, 0, columnPadding, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tCURRENT HASH\tPERSISTED HASHES\tMIGRATED\tLAST HEARTBEAT")
	for _, s := range r.StorageStates {
		migrated := "no"
		if s.Migrated {
			migrated = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n",
			cutMiddle(s.Name, stateResourceWidth),
			orDash(oneLine(s.CurrentStorageVersionHash)),
			hashesCell(s.PersistedStorageVersionHashes),
			migrated,
			age(now, s.LastHeartbeatTime),
		)
	}
	_ = tw.Flush()
	for _, s := range r.StorageStates {
		if h := s.PruneHeld; h != nil {
			writeWrapped(b, fmt.Sprintf("%s: storedVersions not pruned since %s (%s, migration %s): %s",
				s.Name, timeCell(now, h.Since), h.Reason, h.Migration, oneLine(h.Message)))
		}
		if d := s.ServersDisagree; d != "" {
			writeWrapped(b, fmt.Sprintf("%s: not migrated until every API server is known to store it in one version: %s", s.Name, oneLine(d)))
		}
	}
}

// writeEncryption prints the encryption section: a table of the API
// servers, notes on failed reloads, a table of the resources that record a
// re-encryption, and the verdict.
func writeEncryption(b *strings.Builder, e *Encryption, now time.Time, wide bool) {
	b.WriteString("ENCRYPTION AT REST\n")
	hash := shortHash
	if wide {
		hash = func(h string) string { return oneLine(h) }
	}
	switch {
	case len(e.Servers) == 0 && e.Agreed:
		// Servers that have no configuration do not name themselves in
		// their metrics: they were reached, they are not listed.
		b.WriteString("No API server reached has an encryption configuration loaded.\n")
	case len(e.Servers) == 0:
		// Known from neither a lease nor its metrics: Waiting or Error
		// says why.
		b.WriteString("No API server was read.\n")
	default:
		tw := tabwriter.NewWriter(b, 0, 0, columnPadding, ' ', 0)
		if wide {
			fmt.Fprintln(tw, "API SERVER\tENDPOINT\tCONFIGURATION\tLOADED")
		} else {
			fmt.Fprintln(tw, "API SERVER\tCONFIGURATION\tLOADED")
		}
		for _, s := range e.Servers {
			config := hash(s.ConfigHash)
			switch {
			case !s.Reached:
				config = "not reached"
			case s.ConfigHash == "":
				config = "none"
			}
			if wide {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", orDash(oneLine(s.ID)), orDash(oneLine(s.Endpoint)), config, timeCell(now, s.LoadedAt))
			} else {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", cutMiddle(serverName(s), maxIDWidth), config, timeCell(now, s.LoadedAt))
			}
		}
		_ = tw.Flush()
	}
	for _, s := range e.Servers {
		if len(s.KMSKeys) > 0 {
			writeWrapped(b, fmt.Sprintf("%s: KMS v2 keys %s", serverName(s), kmsKeys(s.KMSKeys, hash)))
		}
	}
	for _, s := range e.Servers {
		if s.ReloadFailedAt != nil {
			writeWrapped(b, fmt.Sprintf("%s: reloading its encryption configuration file failed at %s; it still uses configuration %s.",
				serverName(s), timeCell(now, s.ReloadFailedAt), orNone(s.ConfigHash)))
		}
	}
	if len(e.Resources) > 0 {
		writeEncryptedResources(b, e.Resources, now, wide, hash)
		for _, r := range e.Resources {
			if len(r.RewrittenKMSKeys) > 0 {
				writeWrapped(b, fmt.Sprintf("%s: rewritten under KMS v2 keys %s", oneLine(r.Name), kmsKeys(r.RewrittenKMSKeys, hash)))
			}
		}
	}
	writeWrapped(b, e.Verdict)
}

func writeEncryptedResources(b *strings.Builder, resources []EncryptedResource, now time.Time, wide bool, hash func(string) string) {
	rows := [][]string{{"RESOURCE", "REWRITTEN UNDER", "AT", "CURRENT"}}
	by := []string{"BY"}
	for _, r := range resources {
		current := "no"
		if r.Current {
			current = "yes"
		}
		name := oneLine(r.Name)
		if !wide {
			name = cutMiddle(name, stateResourceWidth)
		}
		rows = append(rows, []string{name, orDash(hash(r.RewrittenConfigHash)), timeCell(now, r.RewrittenTime), current})
		by = append(by, orDash(oneLine(r.RewrittenBy)))
	}
	room := math.MaxInt
	if !wide {
		// BY gives way: the migration's name is in -o wide and in the
		// StorageState.
		used := 0
		for col := range rows[0] {
			width := 0
			for _, row := range rows {
				width = max(width, utf8.RuneCountInString(row[col]))
			}
			used += width + columnPadding
		}
		room = max(minNameWidth, TableWidth-used)
	}
	tw := tabwriter.NewWriter(b, 0, 0, columnPadding, ' ', 0)
	for i, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", strings.Join(row, "\t"), cutMiddle(by[i], room))
	}
	_ = tw.Flush()
}

// kmsKeys writes KMS v2 keys as provider=hash, by provider.
func kmsKeys(keys []migrationv1alpha1.KMSKey, hash func(string) string) string {
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, oneLine(k.Provider)+"="+hash(k.KeyIDHash))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// serverName names an API server as an operator knows it: its
// apiServerID, else where it was read, else its hash.
func serverName(s EncryptionServer) string {
	return oneLine(cmp.Or(s.ID, s.Endpoint, s.IDHash))
}

// shortHash keeps the start of a configuration hash: its algorithm and
// twelve hex digits tell configurations apart.
func shortHash(h string) string { return cutEnd(oneLine(h), hashWidth) }

func orNone(hash string) string {
	if hash == "" {
		return "none"
	}
	return oneLine(hash)
}

// timeCell is t and how long ago it was: "2026-11-25T08:01:02Z (3m ago)".
func timeCell(now time.Time, t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	at := t.UTC().Format(time.RFC3339)
	if t.After(now) {
		// A clock ahead of the reader's: no age to tell.
		return at
	}
	return at + " (" + duration.HumanDuration(now.Sub(t.Time)) + " ago)"
}

// writeWrapped writes text in lines of at most TableWidth characters,
// breaking between words; a word longer than that has a line of its own.
func writeWrapped(b *strings.Builder, text string) {
	line := 0
	for _, word := range strings.Fields(text) {
		n := utf8.RuneCountInString(word)
		switch {
		case line == 0:
		case line+1+n > TableWidth:
			b.WriteString("\n")
			line = 0
		default:
			b.WriteString(" ")
			line++
		}
		b.WriteString(word)
		line += n
	}
	if line > 0 {
		b.WriteString("\n")
	}
}

// WriteJSON prints r as indented JSON.
func WriteJSON(w io.Writer, r *Report) error { return document.WriteJSON(w, r) }

// WriteYAML prints r as YAML, with the field names of the JSON.
func WriteYAML(w io.Writer, r *Report) error { return document.WriteYAML(w, r) }

func groupResource(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

// progressCell is "migrated/total", with a "+" when more objects may
// come (the total is a lower bound), or "-" when there are no counters: an
// in-tree migration, or an svm migration that has not started.
func progressCell(p *Progress, started bool) string {
	if p == nil || !started && p.Listed == 0 && p.handled() == 0 {
		return "-"
	}
	more := ""
	if !p.TotalKnown {
		more = "+"
	}
	return fmt.Sprintf("%d/%d%s", p.Migrated, p.Total, more)
}

// wideColumns are the outcome columns of WriteWideTable.
var wideColumns = []string{"RESTORED", "ALREADY-CURRENT", "WRITTEN-SINCE-START", "WRITTEN-SINCE-CHANGE", "GONE", "FAILED"}

// outcomeCells are the objects under each outcome (wideColumns), or dashes
// where there are no counters. RESTORED says how many objects were in an
// old form: the API server stored them anew.
func outcomeCells(p *Progress, started bool) []string {
	if p == nil || !started && p.Listed == 0 && p.handled() == 0 {
		return []string{"-", "-", "-", "-", "-", "-"}
	}
	out := make([]string, 0, len(wideColumns))
	for _, n := range []int64{p.Restored, p.AlreadyCurrent, p.WrittenSinceStart, p.WrittenSinceChange, p.Gone, p.Failed} {
		out = append(out, strconv.FormatInt(n, 10))
	}
	return out
}

func rateCell(rate *float64) string {
	switch {
	case rate == nil:
		return "-"
	case *rate < 10:
		return fmt.Sprintf("%.1f/s", *rate)
	default:
		return fmt.Sprintf("%.0f/s", *rate)
	}
}

func etaCell(seconds *int64) string {
	if seconds == nil {
		return "-"
	}
	// A migration left Running by a controller that went away slows down
	// forever, and its estimate outgrows a time.Duration (292 years): show
	// the longest one rather than what the overflow makes of it.
	d := time.Duration(math.MaxInt64)
	if *seconds < int64(d/time.Second) {
		d = time.Duration(*seconds) * time.Second
	}
	return duration.HumanDuration(d)
}

// age is kubectl's short form of the time since t.
func age(now time.Time, t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// lastError is what went wrong: the Failed condition's message, or the
// Running condition's while svm retries (or when it says anything).
// Succeeded's message is a summary, not an error.
func lastError(m Migration) string {
	msg := ""
	switch m.State {
	case StateFailed, StateRetrying, StateRunning:
		msg = oneLine(m.Message)
		if msg == "" && m.State == StateFailed {
			msg = m.Reason
		}
	}
	return orDash(msg)
}

func hashesCell(hashes []string) string {
	if len(hashes) == 0 {
		return "-"
	}
	shown := hashes[:min(len(hashes), maxHashes)]
	cell := oneLine(strings.Join(shown, ","))
	if rest := len(hashes) - len(shown); rest > 0 {
		cell += fmt.Sprintf(" (+%d)", rest)
	}
	return cell
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine turns any run of whitespace, newlines and tabs included, into
// one space: a tab would split a cell and a newline a row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// cutMiddle shortens s to n characters by replacing its middle with "...".
func cutMiddle(s string, n int) string {
	s = oneLine(s)
	runes := []rune(s)
	if len(runes) <= n {
		return s
	}
	keep := n - len(ellipsis)
	head := (keep + 1) / 2
	return string(runes[:head]) + ellipsis + string(runes[len(runes)-(keep-head):])
}

// cutEnd shortens s to n characters by replacing its end with "...".
func cutEnd(s string, n int) string {
	runes := []rune(s)
	if len(runes) <= n {
		return s
	}
	return string(runes[:n-len(ellipsis)]) + ellipsis
}
