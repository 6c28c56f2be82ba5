package node

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// NetnsEnv names the network namespace (under /run/netns) that hack/e2e
// made and runs the tests in.
const NetnsEnv = "SVM_E2E_NETNS"

// inOwnNetwork fails unless the process runs in the network namespace
// NetnsEnv names: a node set up anywhere else would change the machine's
// own network.
func inOwnNetwork() error {
	name := os.Getenv(NetnsEnv)
	if name == "" {
		return fmt.Errorf("$%s is not set: the node runs only in the network namespace make e2e makes", NetnsEnv)
	}
	var want, got syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+name, &want); err != nil {
		return err
	}
	if err := syscall.Stat("/proc/self/ns/net", &got); err != nil {
		return err
	}
	if want.Ino != got.Ino || want.Dev != got.Dev {
		return fmt.Errorf("the process does not run in network namespace %s", name)
	}
	return nil
}

// setUpNetwork gives the namespace a loopback, the node's address on a
// veth pair whose both ends stay inside, and the kubernetes Service's
// address taken to the API server at apiPort, from pods (PREROUTING) and
// from the node's own processes (OUTPUT).
func setUpNetwork(apiPort int) error {
	dnat := []string{"-d", ServiceIP + "/32", "-p", "tcp", "--dport", "443", "-j", "DNAT",
		"--to-destination", IP + ":" + strconv.Itoa(apiPort)}
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", "node0", "type", "veth", "peer", "name", "node0peer"},
		{"ip", "addr", "add", IP + "/" + strconv.Itoa(nodePrefix), "dev", "node0"},
		{"ip", "addr", "add", peerIP + "/" + strconv.Itoa(nodePrefix), "dev", "node0peer"},
		{"ip", "link", "set", "node0", "up"},
		{"ip", "link", "set", "node0peer", "up"},
		append([]string{"iptables", "-t", "nat", "-A", "PREROUTING"}, dnat...),
		append([]string{"iptables", "-t", "nat", "-A", "OUTPUT"}, dnat...),
	} {
		if err := run(args...); err != nil {
			return err
		}
	}
	return nil
}

// run runs a command to its end, its output in the error.
func run(args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %w: %s", args, err, out.Bytes())
	}
	return nil
}
