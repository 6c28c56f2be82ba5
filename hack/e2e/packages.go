package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// packages are Debian's packages the node needs, each with a file that
// says it is installed.
var packages = map[string]string{
	"containerd":                  "/usr/bin/containerd",
	"runc":                        "/usr/sbin/runc",
	"containernetworking-plugins": "/usr/lib/cni/bridge",
	"iptables":                    "/usr/sbin/iptables",
	"iproute2":                    "/usr/sbin/ip",
	"util-linux":                  "/usr/bin/nsenter",
}

// ensurePackages installs the packages that are missing with apt-get,
// reading the package lists first if the install fails without them.
func ensurePackages(ctx context.Context) error {
	var missing []string
	for pkg, file := range packages {
		if _, err := os.Stat(file); err != nil {
			missing = append(missing, pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	fmt.Printf("e2e: installing %v\n", missing)
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "--no-install-recommends"}, missing...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		return cmd.Run()
	}
	if err := install(); err == nil {
		return nil
	}
	update := exec.CommandContext(ctx, "apt-get", "update")
	update.Stdout, update.Stderr = os.Stdout, os.Stderr
	if err := update.Run(); err != nil {
		return fmt.Errorf("apt-get update: %w", err)
	}
	if err := install(); err != nil {
		return fmt.Errorf("install %v: %w", missing, err)
	}
	return nil
}
