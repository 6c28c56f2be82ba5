package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSummarizeGoroutines(t *testing.T) {
	log := "I1125 10:22:38 svm started\n"
	dump := `SIGQUIT: quit
PC=0x47d1e1 m=0 sigcode=0

goroutine 0 gp=0x1 m=0 mp=0x2 [idle]:
runtime.futex(0x1, 0x80, 0x0)
	runtime/sys_linux_amd64.s:557 +0x21

goroutine 1 gp=0xc000002380 m=nil [select, 5 minutes]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
	runtime/proc.go:460 +0xce
github.com/svm-project/svm/internal/migrator.(*run).retry(0xc0001, {0x1, 0x2}, {0x3, 0x5}, 0xc0002)
	github.com/svm-project/svm/internal/migrator/migrator.go:678 +0x3a5
github.com/svm-project/svm/internal/migrator.(*run).rewrite(0xc0001, {0x1, 0x2}, 0xc0003)
	github.com/svm-project/svm/internal/migrator/migrator.go:488 +0x22e

goroutine 7 gp=0xc000002381 m=nil [select, 5 minutes]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
	runtime/proc.go:460 +0xce
github.com/svm-project/svm/internal/migrator.(*run).retry(0xc0001, {0x1, 0x2}, {0x3, 0x5}, 0xc0002)
	github.com/svm-project/svm/internal/migrator/migrator.go:678 +0x3a5
created by github.com/svm-project/svm/internal/migrator.(*run).rewriteChunk in goroutine 5
	github.com/svm-project/svm/internal/migrator/migrator.go:420 +0x1b

goroutine 9 gp=0xc000002382 m=nil [IO wait]:
internal/poll.runtime_pollWait(0x7f, 0x72)
	runtime/netpoll.go:351 +0x85
`
	gotLog, gotDump := splitGoroutineDump([]byte(log + dump))
	if string(gotLog) != log {
		t.Errorf("log part %q, want %q", gotLog, log)
	}
	want := "   2 × [select, 5 minutes] internal/migrator.(*run).retry at github.com/svm-project/svm/internal/migrator/migrator.go:678"
	if diff := cmp.Diff(want, summarizeGoroutines(gotDump, modulePath)); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if got := summarizeGoroutines(nil, modulePath); got != "(none)" {
		t.Errorf("summary of no dump: %q", got)
	}
	if l, d := splitGoroutineDump([]byte(log)); string(l) != log || d != nil {
		t.Errorf("a log without a dump split into %q and %q", l, d)
	}
}
