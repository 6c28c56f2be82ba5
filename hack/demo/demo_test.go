package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/svm-project/svm/test/framework"
)

// TestDemo runs the README's first command, non-interactively and smaller:
// the demo itself fails unless svm noticed the flip, migrated every object,
// pruned storedVersions and left etcd holding only v2 with unchanged
// content; the test checks that the operator was shown each of those steps.
func TestDemo(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	o := options{
		SVM: framework.SVMBinary(t), CRDDir: framework.CRDBasesDir(), LogDir: t.TempDir(),
		Objects: 600, QPS: 300, Out: &out,
	}
	err := run(framework.Context(t, 5*time.Minute), o)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	text := out.String()
	for _, want := range []string{
		"demo.svm.io/v1: 600 objects",
		"svm notices (it watches CRDs",
		"after the flip",
		"svm created StorageVersionMigration widgets.demo.svm.io-",
		"600/600 migrated 600 (re-stored 600)",
		"demo.svm.io/v2: 600 objects",
		"status.storedVersions: [v1 v2] -> [v2], pruned by svm",
		"the apiVersions their managedFields entries name, in etcd: map[demo.svm.io/v2:600]",
		"served: no longer",
		"accepts removing it from the CRD",
		"server-side apply through v2 by a new manager still works",
		"svm stopped cleanly",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// Live progress: the operator saw the migration part-way, not only its end.
	if n := strings.Count(text, "widgets.demo.svm.io-"); n < 3 {
		t.Errorf("demo showed %d progress lines, want several", n)
	}
}

// TestDemoKMS runs the KMS v2 demo (make demo-kms), smaller: the demo
// itself fails unless svm re-encrypted every Secret under the new key ID
// by itself, etcd's raw values all name it, every Secret reads back as
// before and svm etcd-scan's gate on the old key passes; the test checks
// that the operator was shown each of those steps.
func TestDemoKMS(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	o := options{
		SVM: framework.SVMBinary(t), CRDDir: framework.CRDBasesDir(), LogDir: t.TempDir(),
		Objects: 300, QPS: 100, Out: &out,
	}
	err := runKMS(framework.Context(t, 8*time.Minute), o)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	text := out.String()
	for _, want := range []string{
		"kms:v2:demo-kms:key-1: 300 Secrets",
		"rewrittenKMSKeys demo-kms=sha256:",
		"(key-1)",
		"after the rotation",
		"300/300 migrated 300 (re-stored 300)",
		"(key-2)",
		"kms:v2:demo-kms:key-2: 300 Secrets",
		"all 300 Secrets read back with the same data as before",
		"exit 0: no Secret needs key-1 any more",
		"svm stopped cleanly",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}
