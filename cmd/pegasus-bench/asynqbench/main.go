// Command asynqbench compares enqueue alone, in one run of one harness:
// asynq on a Redis started here with appendonly and appendfsync always
// (every enqueue durable before its answer), and pegasusd at its defaults
// (every append synced), each from the same number of clients, one job
// per request. It prints, round by round and as medians, jobs/s, the
// server's CPU per job (its user and system time, from /proc) and the
// ratio of pegasusd to asynq.
//
// It is a module of its own, so that the project does not depend on
// asynq or Redis:
//
//	go build -o bin/ ./cmd/pegasusd && (cd cmd/pegasus-bench/asynqbench && go run . -pegasusd ../../../bin/pegasusd -rounds 3)
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
)

func main() {
	redisBin := flag.String("redis-server", "redis-server", "the redis-server binary")
	pegasusd := flag.String("pegasusd", "pegasusd", "the pegasusd binary; BEFORE,AFTER runs each in turn")
	n := flag.Int("n", 20000, "jobs per run")
	clients := flag.Int("clients", 16, "clients enqueueing at once")
	rounds := flag.Int("rounds", 3, "rounds; the median is reported")
	dir := flag.String("dir", "", "directory for the servers' data (default: the system temp dir)")
	run := flag.String("run", "", "regexp selecting systems by name (asynq, pegasusd agent, pegasusd broker)")
	flag.Parse()
	if err := compare(context.Background(), *redisBin, strings.Split(*pegasusd, ","), *n, *clients, *rounds, *dir, *run); err != nil {
		fmt.Fprintln(os.Stderr, "asynqbench:", err)
		os.Exit(1)
	}
}

// system is one contender: how to start its server and how a client
// enqueues job i.
type system struct {
	name  string
	start func(ctx context.Context, data string) (*server, error)
	// client returns one client's enqueue; clients are made before the
	// clock starts.
	client func(s *server) (enqueue func(ctx context.Context, i int) error, close func(), err error)
}

type result struct {
	jobs        int
	elapsed     time.Duration
	cpu         time.Duration
	load, load2 string
}

func (r result) perSec() float64 { return float64(r.jobs) / r.elapsed.Seconds() }

func (r result) String() string {
	return fmt.Sprintf("%8.0f jobs/s  server CPU %6.1f µs/job (%.2f cores)  (load %s -> %s)",
		r.perSec(), float64(r.cpu.Microseconds())/float64(r.jobs), r.cpu.Seconds()/r.elapsed.Seconds(), r.load, r.load2)
}

func compare(ctx context.Context, redisBin string, pegasusds []string, n, clients, rounds int, dir, run string) error {
	systems := []system{{name: "asynq", start: func(ctx context.Context, data string) (*server, error) { return startRedis(ctx, redisBin, data) },
		client: asynqClient}}
	for _, bin := range pegasusds {
		label := ""
		if len(pegasusds) > 1 {
			label = " " + filepath.Base(bin)
		}
		start := func(ctx context.Context, data string) (*server, error) { return startPegasusd(ctx, bin, data) }
		systems = append(systems,
			system{name: "pegasusd agent" + label, start: start, client: pegasusClient("/v1/tasks", false)},
			system{name: "pegasusd broker" + label, start: start, client: pegasusClient("/api/v1/tasks", true)})
	}
	if run != "" {
		re, err := regexp.Compile(run)
		if err != nil {
			return err
		}
		systems = slices.DeleteFunc(systems, func(s system) bool { return !re.MatchString(s.name) })
	}
	fmt.Printf("%d jobs per run, %d clients, one job per request; redis-server with appendonly yes, appendfsync always; pegasusd at its defaults\n", n, clients)
	results := make([][]result, len(systems))
	for round := range rounds {
		for i, sys := range systems {
			res, err := measure(ctx, sys, n, clients, dir)
			if err != nil {
				return fmt.Errorf("%s: %w", sys.name, err)
			}
			results[i] = append(results[i], res)
			fmt.Printf("round %d  %-22s %s\n", round, sys.name, res)
		}
		if results[0] != nil && systems[0].name == "asynq" {
			base := results[0][round].perSec()
			var ratios []string
			for i := 1; i < len(systems); i++ {
				ratios = append(ratios, fmt.Sprintf("%s %.2fx", systems[i].name, results[i][round].perSec()/base))
			}
			fmt.Printf("round %d  ratio to asynq: %s\n", round, strings.Join(ratios, ", "))
		}
	}
	fmt.Printf("\nmedian of %d rounds:\n", rounds)
	med := make([]float64, len(systems))
	for i, sys := range systems {
		rs := slices.Clone(results[i])
		slices.SortFunc(rs, func(x, y result) int { return cmp.Compare(x.perSec(), y.perSec()) })
		med[i] = rs[len(rs)/2].perSec()
		fmt.Printf("%-22s %s\n", sys.name, rs[len(rs)/2])
	}
	if systems[0].name == "asynq" {
		for i := 1; i < len(systems); i++ {
			// The median of the per-round ratios: each compares two
			// runs made one after the other, under the same load.
			var rr []float64
			for r := range rounds {
				rr = append(rr, results[i][r].perSec()/results[0][r].perSec())
			}
			slices.Sort(rr)
			fmt.Printf("%-22s %.2fx asynq (median of the rounds' ratios; of the medians %.2fx)\n", systems[i].name, rr[len(rr)/2], med[i]/med[0])
		}
	}
	return nil
}

// measure starts sys's server on a fresh directory, enqueues n jobs from
// clients clients, and stops it.
func measure(ctx context.Context, sys system, n, clients int, dir string) (result, error) {
	tmp, err := os.MkdirTemp(dir, "asynqbench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(tmp)
	srv, err := sys.start(ctx, filepath.Join(tmp, "data"))
	if err != nil {
		return result{}, err
	}
	defer srv.stop()
	enqueues := make([]func(context.Context, int) error, clients)
	for c := range clients {
		enq, cl, err := sys.client(srv)
		if err != nil {
			return result{}, err
		}
		defer cl()
		enqueues[c] = enq
	}
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	cpu0 := procCPU(srv.cmd.Process.Pid)
	load := loadAvg()
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, enq := range enqueues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := enq(ctx, i); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	res := result{jobs: n, elapsed: time.Since(t0), cpu: procCPU(srv.cmd.Process.Pid) - cpu0, load: load, load2: loadAvg()}
	return res, first
}

// server is a server process started here.
type server struct {
	cmd  *exec.Cmd
	addr string // host:port, or for pegasusd its URL
	done chan struct{}
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func startRedis(ctx context.Context, bin, data string) (*server, error) {
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", data,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no", "--loglevel", "warning")
	s := &server{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (apt-get install redis-server, or give -redis-server): %w", bin, err)
	}
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", s.addr)
		if err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, errors.New("redis-server did not answer within 20s")
		}
		time.Sleep(20 * time.Millisecond) // polling for a subprocess to listen
	}
}

var listeningRE = regexp.MustCompile(`pegasusd listening.* url=(http://\S+)`)

func startPegasusd(ctx context.Context, bin, data string) (*server, error) {
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", data, "--log-level", "info", "--log-format", "text")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (go build -o bin/ ./cmd/pegasusd, or give -pegasusd): %w", bin, err)
	}
	urls := make(chan string, 1)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	go func() { <-logged; _ = cmd.Wait(); close(s.done) }()
	select {
	case s.addr = <-urls:
		return s, nil
	case <-s.done:
		return nil, errors.New(bin + " exited before listening")
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, errors.New(bin + " did not start within 30s")
	}
}

func asynqClient(s *server) (func(context.Context, int) error, func(), error) {
	c := asynq.NewClient(asynq.RedisClientOpt{Addr: s.addr, PoolSize: 1})
	enq := func(ctx context.Context, i int) error {
		payload := []byte(`{"input":"job ` + strconv.Itoa(i) + `"}`)
		_, err := c.EnqueueContext(ctx, asynq.NewTask("noop", payload))
		return err
	}
	return enq, func() { c.Close() }, nil
}

// pegasusClient posts one task per request to path, each client on a
// connection of its own.
func pegasusClient(path string, broker bool) func(s *server) (func(context.Context, int) error, func(), error) {
	return func(s *server) (func(context.Context, int) error, func(), error) {
		tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}
		hc := &http.Client{Transport: tr, Timeout: time.Minute}
		enq := func(ctx context.Context, i int) error {
			var body string
			if broker {
				body = `{"title":"job ` + strconv.Itoa(i) + `","required_capabilities":["nobody"]}`
			} else {
				body = `{"input":"job ` + strconv.Itoa(i) + `"}`
			}
			req, err := http.NewRequestWithContext(ctx, "POST", s.addr+path, strings.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			if broker {
				req.Header.Set("X-Agent-ID", "bench")
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				return fmt.Errorf("%s: %d %s", path, resp.StatusCode, bytes.TrimSpace(data))
			}
			return nil
		}
		return enq, tr.CloseIdleConnections, nil
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// procCPU is the user and system time of process pid so far.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
