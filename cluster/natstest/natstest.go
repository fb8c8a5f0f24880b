// Package natstest starts in-process NATS servers with JetStream for tests:
// one server, or a cluster of several on loopback ports with a temporary
// store directory each, the way nats-server's own tests do
// (server/jetstream_helpers_test.go: Options with JetStream, StoreDir and
// cluster routes, NewServer, Start, ReadyForConnections).
//
// It is test support only: nothing outside _test.go files imports it, so
// the daemon's binary does not link the NATS server.
package natstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// readyTimeout bounds every wait of this package: for a server to accept
// connections and for a cluster to elect its JetStream meta leader.
const readyTimeout = 30 * time.Second

// Cluster is a set of in-process nats-server instances with JetStream,
// routed to each other. With one server it is a plain JetStream server
// (no cluster block).
type Cluster struct {
	t       testing.TB
	opts    []*server.Options
	Servers []*server.Server
}

// Start starts n servers (n >= 1) with JetStream, each on a free
// loopback client port and, for n > 1, a free loopback route port, with
// a temporary store directory that fsyncs every write (sync_interval:
// always, so that what a server acknowledged survives it). It waits until
// every server accepts connections and, for n > 1, the cluster has a
// JetStream meta leader that knows all n peers and every server is
// current. The servers are shut down when the test ends.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartSync(t, n, true)
}

// StartSync is Start with the servers' fsync policy: syncAlways false
// leaves JetStream's default (an fsync every 2 minutes; a replicated
// stream counts on its quorum for durability), for benchmarks.
func StartSync(t testing.TB, n int, syncAlways bool) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("natstest: %d servers", n)
	}
	c := &Cluster{t: t}
	var routes []*url.URL
	var routePorts []int
	taken := map[int]bool{}
	if n > 1 {
		for range n {
			p := freePort(t, taken)
			routePorts = append(routePorts, p)
			routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
		}
	}
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("S-%d", i+1),
			Host:       "127.0.0.1",
			Port:       freePort(t, taken),
			JetStream:  true,
			StoreDir:   t.TempDir(),
			SyncAlways: syncAlways,
			NoLog:      true,
			NoSigs:     true,
			// The servers' own limits would reserve a share of the
			// machine's memory and disk; tests need little.
			JetStreamMaxMemory: 256 << 20,
			JetStreamMaxStore:  1 << 30,
		}
		if n > 1 {
			o.Cluster = server.ClusterOpts{Name: "pegasus-test", Host: "127.0.0.1", Port: routePorts[i]}
			o.Routes = routes
		}
		c.opts = append(c.opts, o)
		c.Servers = append(c.Servers, nil)
	}
	t.Cleanup(c.Shutdown)
	for i := range n {
		c.start(i)
	}
	if n > 1 {
		c.WaitReady(n)
	}
	return c
}

// freePort returns a loopback TCP port that was free a moment ago and is
// not in taken. The servers need their ports before they start, since each
// one's routes name all the others (and a restarted server must come back
// on its own). The port is drawn below the system's ephemeral range: a
// port the kernel hands out (to a listener on port 0, or to an outgoing
// connection, as the other servers' routes and the tests running beside
// make) could be taken again before the server binds it, and the server
// would never accept connections.
func freePort(t testing.TB, taken map[int]bool) int {
	t.Helper()
	lo, hi := portRange()
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if taken[p] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ln.Close()
		taken[p] = true
		return p
	}
	t.Fatalf("natstest: no free loopback port in [%d, %d)", lo, hi)
	return 0
}

// portRange is where freePort draws: the 10,000 ports below the
// ephemeral range (/proc/sys/net/ipv4/ip_local_port_range; Linux's
// default starts at 32768), and never below 1024.
func portRange() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				hi = n
			}
		}
	}
	return max(hi-10000, 1024), hi
}

func (c *Cluster) start(i int) {
	c.t.Helper()
	o := *c.opts[i]
	s, err := server.NewServer(&o)
	if err != nil {
		c.t.Fatalf("natstest: server %d: %v", i+1, err)
	}
	s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		s.Shutdown()
		c.t.Fatalf("natstest: server %d did not accept connections within %v", i+1, readyTimeout)
	}
	c.Servers[i] = s
}

// URL is the client URL of every server, comma-separated: what
// nats.Connect and pegasusd --publish take.
func (c *Cluster) URL() string {
	var us []string
	for _, o := range c.opts {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(us, ",")
}

// JetStream connects a client to the servers (closed when the test ends).
func (c *Cluster) JetStream() jetstream.JetStream {
	c.t.Helper()
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		c.t.Fatal(err)
	}
	return js
}

// Stop shuts server i down (its store stays) and waits until it is gone.
func (c *Cluster) Stop(i int) {
	if s := c.Servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.Servers[i] = nil
	}
}

// Restart starts server i again on its ports and store directory.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.Stop(i)
	c.start(i)
}

// Shutdown stops every server.
func (c *Cluster) Shutdown() {
	for i := range c.Servers {
		c.Stop(i)
	}
}

// WaitReady waits until a running server is the JetStream meta leader,
// it knows peers peers, and every running server is current with it.
// The servers offer no notification for this, so it polls (every 10 ms,
// for at most readyTimeout), as nats-server's own helpers do.
func (c *Cluster) WaitReady(peers int) {
	c.t.Helper()
	c.poll(func() bool { return c.ready(peers) }, "no JetStream meta leader with %d peers", peers)
}

// poll calls cond every 10 ms until it holds, for at most readyTimeout,
// and fails the test with the message if it never does.
func (c *Cluster) poll(cond func() bool, format string, args ...any) {
	c.t.Helper()
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		<-tick.C
	}
	c.t.Fatalf("natstest: "+format+" within %v", append(args, readyTimeout)...)
}

// WaitStreamCurrent waits until the stream has a leader and every one of
// its replicas is current: stopping another server before that may leave
// the stream without a quorum of up-to-date replicas. It polls the
// stream's info, like WaitReady.
func (c *Cluster) WaitStreamCurrent(js jetstream.JetStream, stream string) {
	c.t.Helper()
	c.poll(func() bool { return streamCurrent(js, stream) }, "stream %s has no leader with every replica current", stream)
}

// WaitLastHeader waits until the stream exists and its last message has
// the decimal header h at n or more (the fan-out's Pegasus-Seq). It polls
// (every 10 ms, each request bounded by a second, for at most
// readyTimeout): a consumer on a replicated stream can hang for its whole
// timeout after the server it lives on stops, a request per poll cannot.
func WaitLastHeader(t testing.TB, js jetstream.JetStream, stream, h string, n uint64) {
	t.Helper()
	var got uint64
	var last error
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if got, last = lastHeader(js, stream, h); got >= n {
			return
		}
		<-tick.C
	}
	t.Fatalf("natstest: the last message of stream %s has %s %d, want %d or more, after %v (%v)", stream, h, got, n, readyTimeout, last)
}

func lastHeader(js jetstream.JetStream, stream, h string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs == 0 {
		return 0, err
	}
	m, err := st.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(m.Header.Get(h), 10, 64)
}

func streamCurrent(js jetstream.JetStream, stream string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return false
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		return false
	}
	for _, r := range info.Cluster.Replicas {
		if !r.Current || r.Offline {
			return false
		}
	}
	return true
}

func (c *Cluster) ready(peers int) bool {
	var leader *server.Server
	for _, s := range c.Servers {
		if s != nil && s.JetStreamIsLeader() {
			leader = s
		}
	}
	if leader == nil || len(leader.JetStreamClusterPeers()) != peers {
		return false
	}
	for _, s := range c.Servers {
		if s != nil && s.Running() && !s.JetStreamIsCurrent() {
			return false
		}
	}
	return true
}
