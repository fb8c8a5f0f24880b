package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	cfgfile "github.com/pegasus-engine/pegasus/config"
)

// reloadLimitsOnHUP reads the configuration file again at every SIGHUP,
// until ctx ends, and applies its limits (docs/limits.md): an operator
// raises a budget, then resumes the tasks it suspended.
func (d *daemon) reloadLimitsOnHUP(ctx context.Context) {
	if d.cfg.engine.Config == nil {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = d.reloadLimits()
			}
		}
	}()
}

// reloadLimits reads the configuration file again and applies its
// limits; a file that no longer loads changes nothing and is logged.
func (d *daemon) reloadLimits() error {
	f, err := cfgfile.Load(d.cfg.engine.Config.Path, os.Getenv)
	if err != nil {
		d.log.Error("reloading the limits: the configuration does not load; the limits stay as they were", "err", err)
		return err
	}
	d.engine.ReloadLimits(f)
	d.log.Info("limits reloaded", "config", f.Path)
	return nil
}
