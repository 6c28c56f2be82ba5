package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// writeResults writes the run's table, with the machine it ran on, to
// $SVM_BENCH_RESULTS (default _output/benchmarks.md at the repository
// root), to be copied into docs/benchmarks.md.
func writeResults(b *testing.B, results []result, notes []string) {
	b.Helper()
	path := os.Getenv("SVM_BENCH_RESULTS")
	if path == "" {
		path = filepath.Join("..", "..", "_output", "benchmarks.md")
	}
	ceiling := map[string]float64{}
	naive1 := map[string]float64{}
	for _, r := range results {
		if strings.HasPrefix(r.strategy, "ceiling") {
			ceiling[r.workload] = max(ceiling[r.workload], r.rate())
		}
		if strings.HasPrefix(r.strategy, "naive") && strings.Contains(r.strategy, " 1 worker") {
			naive1[r.workload] = r.rate()
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "Run of %s on %s.\n\n", time.Now().UTC().Format("2006-01-02"), machine())
	sb.WriteString("| workload | strategy | objects | objects/s | of ceiling | x naive (1 worker) | API server CPU ms/object | svm CPU ms/object | svm peak RSS | requests/object | found rewritten by others |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		ofCeiling, xNaive, svmCPU, rss, skipped := "", "", "", "", ""
		if c := ceiling[r.workload]; c > 0 {
			ofCeiling = fmt.Sprintf("%.2f", r.rate()/c)
		}
		if n := naive1[r.workload]; n > 0 {
			xNaive = fmt.Sprintf("%.2f", r.rate()/n)
		}
		if r.usage.process {
			svmCPU = fmt.Sprintf("%.3f", ms(r.usage.cpu)/float64(r.objects))
			rss = fmt.Sprintf("%.0f MB", float64(r.usage.peakRSS)/1e6)
			skipped = fmt.Sprint(r.usage.skipped)
		}
		fmt.Fprintf(&sb, "| %s | %s | %d | %.0f | %s | %s | %.2f | %s | %s | %.2f | %s |\n",
			r.workload, r.strategy, r.objects, r.rate(), ofCeiling, xNaive, ms(r.serverCPU)/float64(r.objects), svmCPU, rss,
			float64(r.requests)/float64(r.objects), skipped)
	}
	if len(notes) > 0 {
		sb.WriteString("\n")
		for _, n := range notes {
			fmt.Fprintf(&sb, "- %s\n", n)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("results in %s:\n%s", path, sb.String())
}

// machine describes the CPU, cores and memory the run had.
func machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB of memory", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%d cores (%s)%s, %s/%s, %s; the API server, etcd, svm and the benchmark share them",
		runtime.NumCPU(), model, mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}
