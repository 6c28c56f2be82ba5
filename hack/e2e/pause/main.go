// Command pause is the pod sandbox's process on the e2e node: it holds the
// pod's namespaces and does nothing else, as Kubernetes' pause image does,
// so that the node runs pods without pulling an image from a registry. It
// exits on SIGINT or SIGTERM and reaps the children it inherits as PID 1.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
