// Command e2e runs svm's end-to-end tests (test/e2e, built with the e2e
// tag) on a real node, and leaves the machine as it found it:
//
//	go run ./hack/e2e --test-binary _output/e2e/e2e.test --svm-image _output/e2e/svm-image.tar
//
// It must run as root. It installs Debian's containerd, runc and CNI
// plugins where they are missing, builds the pod sandbox's image (pause),
// notes the machine's state (sysctls, iptables rules, interfaces, mounts,
// cgroups, the directories a kubelet makes), and runs the tests in a
// network namespace and a mount namespace of their own, where test/node
// starts the node: test traffic stays inside. Then it stops whatever the
// tests left running, puts the state back, and fails if anything
// differs. `make e2e` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/node"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
}

func run() error {
	testBinary := flag.String("test-binary", "", "the test binary (go test -c -tags e2e ./test/e2e)")
	svmImage := flag.String("svm-image", "", "svm's image tarball (make image)")
	runTests := flag.String("run", "", "run only the tests this regular expression matches")
	timeout := flag.Duration("timeout", 20*time.Minute, "how long the tests may take")
	artifacts := flag.String("artifacts", "", "where a failed test keeps the logs of the control plane, the node and the pods; emptied first")
	flag.Parse()
	if *testBinary == "" || *svmImage == "" {
		return errors.New("--test-binary and --svm-image are required")
	}
	if *artifacts != "" {
		if err := os.RemoveAll(*artifacts); err != nil {
			return err
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("a kubelet and containerd need root: run as root")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ensurePackages(ctx); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "svm-e2e-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	pause := filepath.Join(work, "pause.tar")
	if err := buildPauseImage(ctx, work, pause); err != nil {
		return err
	}
	before, err := readHost()
	if err != nil {
		return err
	}
	ns := fmt.Sprintf("svm-e2e-%d", os.Getpid())
	if err := command("ip", "netns", "add", ns).Run(); err != nil {
		return fmt.Errorf("create network namespace %s: %w", ns, err)
	}
	// The control plane starts before the node, on the namespace's
	// loopback.
	if err := command("ip", "-n", ns, "link", "set", "lo", "up").Run(); err != nil {
		_ = command("ip", "netns", "delete", ns).Run()
		return fmt.Errorf("bring up the loopback of %s: %w", ns, err)
	}
	started := time.Now()
	testErr := runTestsIn(ctx, ns, work, *testBinary, *runTests, *timeout, map[string]string{
		"SVM_E2E_PAUSE_IMAGE": pause, "SVM_E2E_SVM_IMAGE": *svmImage, node.NetnsEnv: ns, controlplane.ArtifactsEnv: *artifacts,
	})
	if testErr != nil && *artifacts != "" {
		fmt.Printf("e2e: the logs of the failed run are in %s\n", *artifacts)
	}
	cleanErr := cleanUp(ns, before)
	fmt.Printf("e2e: tests and cleanup took %s\n", time.Since(started).Round(time.Second))
	return errors.Join(testErr, cleanErr, checkHost(before))
}

// runTestsIn runs the test binary in network namespace ns and a private
// mount namespace, with TMPDIR under work and env added.
func runTestsIn(ctx context.Context, ns, work, binary, runTests string, timeout time.Duration, env map[string]string) error {
	tmp := filepath.Join(work, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	args := []string{"--net=/run/netns/" + ns, "unshare", "--mount", "--propagation", "private",
		binary, "-test.v", "-test.timeout", timeout.String()}
	if runTests != "" {
		args = append(args, "-test.run", runTests)
	}
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the tests failed: %w", err)
	}
	return nil
}

// checkHost fails when the machine differs from before.
func checkHost(before hostState) error {
	after, err := readHost()
	if err != nil {
		return err
	}
	if diffs := differences(before, after); len(diffs) > 0 {
		for _, d := range diffs {
			fmt.Fprintln(os.Stderr, "e2e: the machine was not left as found:", d)
		}
		return fmt.Errorf("%d differences on the machine after the tests", len(diffs))
	}
	fmt.Println("e2e: the machine is as it was: sysctls, iptables rules, interfaces, mounts, cgroups, directories")
	return nil
}

// command is exec.Command with its output on ours.
func command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd
}
