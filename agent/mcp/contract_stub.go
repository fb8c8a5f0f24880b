// Package mcp: this file is a stand-in with the contract's signatures, so
// that the engine compiles before the real package is merged; the real
// package replaces it (delete this file at merge). It starts no server.
package mcp

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pegasus-engine/pegasus/agent/tools"
)

type ServerConfig struct {
	Name    string
	Command string
	Args    []string
	Env     map[string]string
	Dir     string
	URL     string
	Headers map[string]string
}

type Options struct {
	Logger      *slog.Logger
	InitTimeout time.Duration
}

type Manager struct {
	servers []ServerConfig
	changed chan struct{}
}

func Start(ctx context.Context, servers []ServerConfig, opts *Options) *Manager {
	return &Manager{servers: servers, changed: make(chan struct{})}
}

func (m *Manager) Tools() []tools.Tool             { return nil }
func (m *Manager) Changed() <-chan struct{}        { return m.changed }
func (m *Manager) Collector() prometheus.Collector { return nopCollector{} }
func (m *Manager) Close() error                    { return nil }

func (m *Manager) Servers() []ServerStatus {
	out := make([]ServerStatus, len(m.servers))
	for i, s := range m.servers {
		t := "stdio"
		if s.URL != "" {
			t = "http"
		}
		out[i] = ServerStatus{Name: s.Name, Transport: t, State: "starting"}
	}
	return out
}

type ServerStatus struct {
	Name, Transport, State, Error string
	Tools, Restarts               int
	Since                         time.Time
}

type nopCollector struct{}

func (nopCollector) Describe(chan<- *prometheus.Desc) {}
func (nopCollector) Collect(chan<- prometheus.Metric) {}
