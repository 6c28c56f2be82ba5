package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/svm-project/svm/internal/operation"
)

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressPrinter shows a migration's progress: a bar redrawn in place on a
// terminal, or a plain line every few seconds otherwise (logs, CI).
type progressPrinter struct {
	out      io.Writer
	name     string
	terminal bool
	start    time.Time

	mu        sync.Mutex
	lastPrint time.Time
	drawn     bool
}

func newProgressPrinter(out io.Writer, name string, terminal bool) *progressPrinter {
	return &progressPrinter{out: out, name: name, terminal: terminal, start: time.Now()}
}

func (p *progressPrinter) update(pr operation.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if !p.terminal && now.Sub(p.lastPrint) < 5*time.Second {
		return
	}
	p.lastPrint = now
	line := progressLine(p.name, pr, now.Sub(p.start))
	if p.terminal {
		fmt.Fprintf(p.out, "\r\033[K%s", line)
		p.drawn = true
		return
	}
	fmt.Fprintln(p.out, line)
}

func (p *progressPrinter) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.out, "\r\033[K")
	}
}

// progressLine renders counters, rate and, when the server estimates how
// many objects remain, a bar and the time left.
func progressLine(name string, pr operation.Progress, elapsed time.Duration) string {
	handled := pr.Handled()
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(handled) / s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s ", name)
	if pr.RemainingEstimate != nil {
		total := pr.Listed + *pr.RemainingEstimate
		frac := 0.0
		if total > 0 {
			frac = float64(handled) / float64(total)
		}
		const width = 24
		filled := min(width, int(frac*width))
		fmt.Fprintf(&b, "[%s%s] %d/%d ", strings.Repeat("#", filled), strings.Repeat(".", width-filled), handled, total)
		if rate > 0 {
			left := time.Duration(float64(total-handled) / rate * float64(time.Second))
			defer fmt.Fprintf(&b, " ETA %s", left.Round(time.Second))
		}
	} else {
		fmt.Fprintf(&b, "%d ", handled)
	}
	fmt.Fprintf(&b, "migrated %d (re-stored %d) skipped %d failed %d, %.0f/s", pr.Migrated(), pr.Restored, pr.Skipped(), pr.Failed, rate)
	return b.String()
}
