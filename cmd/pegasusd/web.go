package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/pegasus-engine/pegasus/dashboard"
	"github.com/pegasus-engine/pegasus/internal/metrics"
)

// web is what the daemon serves beside the API: the dashboard, /metrics
// (on the API's listener behind the token, or on its own loopback
// listener with --metrics-addr) and the metrics' event subscription.
type web struct {
	metrics *metrics.Metrics
	ln      net.Listener // --metrics-addr, or nil
	srv     *http.Server
	cancel  context.CancelFunc
	done    chan struct{}
}

// listenMetrics binds --metrics-addr, which must be a loopback address:
// the separate listener has no token.
func listenMetrics(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %q: %w", addr, err)
	}
	if !isLoopback(host) {
		return nil, fmt.Errorf("--metrics-addr %q: only a loopback address may serve /metrics without the token", addr)
	}
	return net.Listen("tcp", addr)
}

// startWeb starts the metrics and returns the daemon's HTTP handler: the
// API, the dashboard and, without --metrics-addr, /metrics.
func (d *daemon) startWeb(metricsLn net.Listener) http.Handler {
	o := metrics.Options{GoCollectors: true}
	if rl := d.replicated; rl != nil {
		o.ClusterCommits = func() (uint64, uint64, uint64, uint64) {
			s := rl.CommitStats()
			return s.Appends, s.Batches, s.Refused, s.Messages
		}
	}
	m := metrics.New(d.agent, d.events, o)
	ctx, cancel := context.WithCancel(context.Background())
	d.web = &web{metrics: m, ln: metricsLn, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.web.done)
		if err := m.Run(ctx, d.agent.Recovery().Head+1); err != nil {
			d.log.Warn("metrics stopped reading the log", "err", err)
		}
	}()

	mux := http.NewServeMux()
	mux.Handle("/", d.server.routes())
	ui := dashboard.Handler()
	mux.Handle("GET /{$}", ui)
	mux.Handle("GET /ui/", ui)
	if metricsLn == nil {
		mux.Handle("GET /metrics", d.server.middleware(m.Handler()))
	} else {
		d.web.srv = &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(d.log.Handler(), slog.LevelWarn)}
		go func() {
			if err := d.web.srv.Serve(metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.log.Error("metrics server stopped", "err", err)
			}
		}()
		d.log.Info("metrics listening", "url", "http://"+metricsLn.Addr().String()+"/metrics")
	}
	return m.InstrumentHTTP(mux)
}

// stop ends the metrics listener and subscription.
func (w *web) stop(ctx context.Context) {
	if w == nil {
		return
	}
	if w.srv != nil {
		if err := w.srv.Shutdown(ctx); err != nil {
			w.srv.Close()
		}
	}
	w.cancel()
	<-w.done
}
