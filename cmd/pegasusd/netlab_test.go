package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A netLab is a private network on this machine for the partition tests:
// a Linux bridge in the test's own (root) namespace with the address
// <subnet>.1/24, and one network namespace per host, each joined to the
// bridge by a veth pair, with <subnet>.<n>/24 on its side and no route
// but the bridge's subnet. The subnet is 10.77.<k>.0/24 with k drawn from
// the test's process id, so two runs do not meet; nothing is routed off
// the bridge (the test does not touch the machine's routes or
// forwarding), so this traffic never leaves the machine.
//
// Faults are nftables rules in a table of each namespace's own
// (inet pegasus_fault, an input and an output chain) that drop packets to
// or from some addresses: both chains for a partition, one for a
// one-way loss. Heal flushes them. Every name starts with pgp<pid>, so a
// later run finds what a crashed one left (its pid no longer running)
// and removes it: newNetLab does so first.
type netLab struct {
	t      *testing.T
	prefix string // pgp<pid>
	subnet string // 10.77.<k>
	hosts  map[string]*labHost
}

// labHost is a network namespace on the lab's bridge.
type labHost struct {
	name string // the lab's name for it: n1, d1, ...
	ns   string // the namespace: <prefix>-<name>
	ip   string
}

// netLabMissing says why this machine cannot run a netLab, "" if it can:
// it needs root, ip (iproute2) and nft (nftables).
func netLabMissing() string {
	if os.Geteuid() != 0 {
		return "network namespaces need root"
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed (Debian: apt-get install -y iproute2 nftables)"
		}
	}
	return ""
}

var labNameRE = regexp.MustCompile(`^pgp(\d+)`)

// newNetLab removes what crashed earlier runs left, then creates the
// bridge and a namespace per name, numbered from 11 in the subnet. It is
// torn down when the test ends (its processes must be stopped by
// earlier cleanups, which run first since they were registered later).
func newNetLab(t *testing.T, names ...string) *netLab {
	t.Helper()
	cleanStaleLabs(t)
	pid := os.Getpid()
	lab := &netLab{t: t, prefix: fmt.Sprintf("pgp%d", pid), subnet: fmt.Sprintf("10.77.%d", 10+pid%240), hosts: map[string]*labHost{}}
	t.Cleanup(lab.teardown)
	br := lab.prefix + "br"
	lab.ip("link", "add", br, "type", "bridge")
	lab.ip("addr", "add", lab.subnet+".1/24", "dev", br)
	lab.ip("link", "set", br, "up")
	for i, name := range names {
		h := &labHost{name: name, ns: lab.prefix + "-" + name, ip: fmt.Sprintf("%s.%d", lab.subnet, 11+i)}
		veth := lab.prefix + name // on the bridge's side; eth0 inside
		lab.ip("netns", "add", h.ns)
		lab.ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
		lab.ip("link", "set", veth, "master", br, "up")
		lab.ip("-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0")
		lab.ip("-n", h.ns, "link", "set", "eth0", "up")
		lab.ip("-n", h.ns, "link", "set", "lo", "up")
		lab.nft(h, "add table inet pegasus_fault\n"+
			"add chain inet pegasus_fault in { type filter hook input priority 0; policy accept; }\n"+
			"add chain inet pegasus_fault out { type filter hook output priority 0; policy accept; }\n")
		lab.hosts[name] = h
	}
	return lab
}

// clientIP is the address the test's own clients have on the bridge.
func (lab *netLab) clientIP() string { return lab.subnet + ".1" }

// wrap is the command prefix that runs a program in h's namespace.
func (lab *netLab) wrap(h string) []string { return []string{"ip", "netns", "exec", lab.hosts[h].ns} }

func (lab *netLab) ip(args ...string) {
	lab.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		lab.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (lab *netLab) nft(h *labHost, script string) {
	lab.t.Helper()
	cmd := exec.Command("ip", "netns", "exec", h.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		lab.t.Fatalf("nft in %s: %v\n%s\n%s", h.ns, err, script, out)
	}
}

// addrs are the addresses of hosts, or the clients' for "client".
func (lab *netLab) addrs(hosts []string) []string {
	var ips []string
	for _, h := range hosts {
		if h == "client" {
			ips = append(ips, lab.clientIP())
		} else {
			ips = append(ips, lab.hosts[h].ip)
		}
	}
	return ips
}

// drop makes every packet from each of from to each of to vanish: rules
// in from's output chains (and, for a host in to, in its input chains, so
// that a partition holds whichever side sends). "client" names the test's
// own clients (the root namespace, which keeps no rules: cut a client
// off in the host's namespace). Only from -> to: call it both ways for a
// partition.
func (lab *netLab) drop(from, to []string) {
	lab.t.Helper()
	lab.rules(from, "out ip daddr", to)
	lab.rules(to, "in ip saddr", from)
}

// rules adds to each of hosts' chain (but the clients') a rule that drops
// the packets whose match (daddr or saddr) is one of peers' addresses.
func (lab *netLab) rules(hosts []string, match string, peers []string) {
	lab.t.Helper()
	for _, h := range hosts {
		if h == "client" {
			continue
		}
		var b strings.Builder
		for _, ip := range lab.addrs(peers) {
			fmt.Fprintf(&b, "add rule inet pegasus_fault %s %s drop\n", match, ip)
		}
		lab.nft(lab.hosts[h], b.String())
	}
}

// partition cuts a from b both ways.
func (lab *netLab) partition(a, b []string) {
	lab.t.Helper()
	lab.drop(a, b)
	lab.drop(b, a)
}

// heal removes every fault.
func (lab *netLab) heal() {
	lab.t.Helper()
	for _, h := range lab.hosts {
		lab.nft(h, "flush chain inet pegasus_fault in\nflush chain inet pegasus_fault out\n")
	}
}

func (lab *netLab) teardown() {
	for _, h := range lab.hosts {
		killNamespace(h.ns)
	}
	_ = exec.Command("ip", "link", "del", lab.prefix+"br").Run()
}

// killNamespace kills what still runs in a namespace of a lab (by process
// id: only processes a lab started live there) and deletes it, which
// deletes its veth pair.
func killNamespace(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = exec.Command("ip", "netns", "del", ns).Run()
}

// cleanStaleLabs removes the namespaces, bridges and veths of labs whose
// test process is gone.
func cleanStaleLabs(t *testing.T) {
	t.Helper()
	stale := func(name string) bool {
		m := labNameRE.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, _ := strconv.Atoi(m[1])
		return pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && stale(f[0]) {
			t.Logf("removing the namespace %s of an earlier run", f[0])
			killNamespace(f[0])
		}
	}
	out, _ = exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if stale(name) {
			t.Logf("removing the link %s of an earlier run", name)
			_ = exec.Command("ip", "link", "del", name).Run()
		}
	}
}
