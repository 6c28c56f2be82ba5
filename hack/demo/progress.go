package main

import (
	"fmt"
	"io"
	"strings"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// progressBar draws a migration's progress from its status: redrawn in
// place on a terminal, a line per change otherwise.
type progressBar struct {
	out      io.Writer
	terminal bool
	last     string
}

func newProgressBar(out io.Writer, terminal bool) *progressBar {
	return &progressBar{out: out, terminal: terminal}
}

func (b *progressBar) show(m *migrationv1alpha1.StorageVersionMigration) {
	line := barLine(m)
	if line == b.last {
		return
	}
	b.last = line
	if b.terminal {
		fmt.Fprintf(b.out, "\r\033[K    %s", line)
		return
	}
	fmt.Fprintf(b.out, "    %s\n", line)
}

func (b *progressBar) done(m *migrationv1alpha1.StorageVersionMigration) {
	if b.terminal && b.last != "" {
		fmt.Fprintln(b.out)
	}
}

func barLine(m *migrationv1alpha1.StorageVersionMigration) string {
	p := m.Status.Progress
	if p.Listed == 0 && !m.IsFinished() {
		return m.Name + " starting"
	}
	handled := p.Migrated() + p.Skipped() + p.Failed
	total := p.Listed
	if p.RemainingEstimate != nil {
		total += *p.RemainingEstimate
	}
	const width = 30
	filled := 0
	if total > 0 {
		filled = min(width, int(handled*width/total))
	}
	return fmt.Sprintf("%s [%s%s] %d/%d migrated %d (re-stored %d) skipped %d failed %d",
		m.Name, strings.Repeat("#", filled), strings.Repeat(".", width-filled), handled, total, p.Migrated(), p.Restored, p.Skipped(), p.Failed)
}
