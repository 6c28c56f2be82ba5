package controlplane

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// kube-apiserver derives its identity (the apiServerID of its
// StorageVersion reports and its identity lease) from the hostname alone,
// so two servers on one host would report as one and overwrite each
// other's entries. A peer is therefore given a hostname of its own, in a
// UTS namespace of its own. Go cannot run code in a child between fork and
// exec, so the running program starts itself as a helper that sets the
// hostname and then executes kube-apiserver in its place.

// hostnameEnv carries the hostname to the helper.
const hostnameEnv = "SVM_CONTROLPLANE_HOSTNAME"

// RunHostnameHelper must be called first thing in main or TestMain of a
// program that starts peers with StartPeer. In the helper process it sets
// the hostname and executes the command in its arguments, never
// returning; elsewhere it returns at once.
func RunHostnameHelper() {
	name := os.Getenv(hostnameEnv)
	if name == "" {
		return
	}
	if err := syscall.Sethostname([]byte(name)); err != nil {
		fmt.Fprintf(os.Stderr, "set hostname %q: %v\n", name, err)
		os.Exit(1)
	}
	if err := os.Unsetenv(hostnameEnv); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	err := syscall.Exec(os.Args[1], os.Args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "exec %s: %v\n", os.Args[1], err)
	os.Exit(1)
}

// withHostname turns cmd into the helper that runs it under hostname: the
// running program, in a new UTS namespace (and, when not root, a new user
// namespace in which it may set the hostname).
func withHostname(cmd *exec.Cmd, hostname string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd.Args = append([]string{self}, cmd.Args...)
	cmd.Args[1] = cmd.Path
	cmd.Path = self
	cmd.Env = append(os.Environ(), hostnameEnv+"="+hostname)
	cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUTS
	if uid, gid := os.Getuid(), os.Getgid(); uid != 0 {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
	}
	return nil
}
