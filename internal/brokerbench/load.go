package brokerbench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pegasus-engine/pegasus/client"
)

// What both workloads share: the two shapes of offered load, the HTTP
// client and the figures.

// want is how many tasks a run creates: Tasks in the closed loop, Rate x
// Duration in the open loop.
func (c Config) want() (int64, error) {
	n := int64(c.Tasks)
	if c.Rate > 0 {
		n = int64(c.Rate * c.Duration.Seconds())
	}
	if n <= 0 {
		return 0, fmt.Errorf("brokerbench: nothing to run: rate %v for %s", c.Rate, c.Duration)
	}
	return n, nil
}

func (r Result) String() string {
	shape := "closed loop"
	if r.Offered > 0 {
		shape = fmt.Sprintf("open loop at %.0f/s", r.Offered)
	}
	s := fmt.Sprintf("%d tasks (%s) in %s: %.0f tasks/s", r.Tasks, shape, r.Elapsed.Round(time.Millisecond), r.PerSec)
	if r.P50 > 0 {
		s += fmt.Sprintf(", create-to-complete p50 %s p99 %s max %s", ms(r.P50), ms(r.P99), ms(r.Max))
	}
	if r.AssignP50 > 0 {
		s += fmt.Sprintf(" (create-to-assign p50 %s p99 %s)", ms(r.AssignP50), ms(r.AssignP99))
	}
	return s
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// newResult is the figures of n tasks done in elapsed, with their
// create-to-complete latencies lat (sorted here; none in a closed loop
// that does not measure them).
func newResult(n int64, elapsed time.Duration, rate float64, lat []time.Duration) Result {
	res := Result{Tasks: int(n), Elapsed: elapsed, Offered: rate, PerSec: float64(n) / elapsed.Seconds()}
	if len(lat) > 0 {
		slices.Sort(lat)
		res.P50, res.P99, res.Max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	}
	return res
}

// closedLoop creates n tasks from clients clients, each sending its next
// create when the last one is answered.
func closedLoop(ctx context.Context, clients int, n int64, create func(context.Context, time.Time) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= n {
				if err := create(ctx, time.Now()); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// openLoop offers one task every 1/rate from start, n in all, each create
// on its own, so that a slow answer does not delay the next task; each
// create's latency counts from its due time (no coordinated omission).
func openLoop(ctx context.Context, start time.Time, rate float64, n int64, create func(context.Context, time.Time) error) error {
	every := time.Duration(float64(time.Second) / rate)
	var wg sync.WaitGroup
	defer wg.Wait()
	errc := make(chan error, 1)
	for i := range n {
		due := start.Add(time.Duration(i) * every)
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil
			case err := <-errc:
				return err
			}
		}
		wg.Go(func() {
			if err := create(ctx, due); err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// clients are the workload's clients of the daemon, one per X-Agent-ID,
// over one pool of connections. They do not retry: a refused or failed
// request fails the run, and a create sends no Idempotency-Key (which
// would cost the daemon one more synced write per task).
type clients struct {
	cfg  Config
	http *http.Client
}

// newClients keeps enough idle connections for conns concurrent requests
// and more, so that no request opens a connection after the first ones.
func newClients(cfg Config, conns int) *clients {
	return &clients{cfg: cfg, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns + 64}}}
}

// as returns the client whose X-Agent-ID is agent.
func (cs *clients) as(agent string) (*client.Client, error) {
	return client.New(cs.cfg.URL, &client.Options{Token: cs.cfg.Token, AgentID: agent, HTTPClient: cs.http, MaxAttempts: 1})
}

func (cs *clients) close() { cs.http.CloseIdleConnections() }
