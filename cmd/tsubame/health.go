package main

import (
	"context"
	"sync"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/health"
)

// watchStore starts the goroutines that watch the store, stopped by
// closeAll (stopWatch, then watching) before the store closes: the store's
// probe (store.probe_interval), checked once now so that readiness has its
// answer from the start, and, on a store with a change feed, the feed, by
// which writes of other nodes (and the CLI) drop entries from our cache.
func (m *Main) watchStore(ctx context.Context, backend tsubame.Store) {
	m.run.store = health.NewProbe(health.Store, func(ctx context.Context) error {
		_, err := backend.List(ctx, "", 1)
		return err
	}, m.Config.Store.ProbeInterval, m.Logger)
	m.run.store.Check(ctx)
	wctx, cancel := context.WithCancel(context.Background())
	m.run.stopWatch, m.run.watching = cancel, make(chan struct{})
	var watchers sync.WaitGroup
	watchers.Go(func() { m.run.store.Run(wctx) })
	if feed, ok := backend.(tsubame.ChangeFeed); ok {
		watchers.Go(func() { _ = feed.Watch(wctx, m.Cache) })
	}
	go func() {
		watchers.Wait()
		close(m.run.watching)
	}()
}

// readiness is what both listeners' /readyz report: this node can serve
// while it is open and not draining, its cache was warmed at start and
// its access logs can write. The store's state is reported beside them
// and not required: with the store down a node serves the ids it has
// cached and answers 503 at once for the others (the circuit breaker), so
// a store outage must not take every node out of the load balancer's pool
// at once. It only reads state others keep (the store is probed in the
// background), so any number of probes costs the store nothing.
func (m *Main) readiness() health.Report {
	rep := health.Report{
		{Name: health.Serving, Required: true, OK: m.run.ready.Load(), Detail: "starting or draining"},
		{Name: health.CacheWarm, Required: true, OK: m.run.warmed.Load(), Detail: "warming the cache"},
	}
	for _, l := range []struct {
		name string
		log  *accesslog.Logger
	}{{health.AccessLogFile, m.logs.file}, {health.AccessLogStore, m.logs.store}} {
		if l.log != nil {
			c := health.Check{Name: l.name, Required: true, OK: true}
			if err := l.log.Healthy(); err != nil {
				c.OK, c.Detail = false, err.Error()
			}
			rep = append(rep, c)
		}
	}
	if m.run.store != nil {
		rep = append(rep, m.run.store.Result(false))
	}
	for i := range rep {
		if rep[i].OK {
			rep[i].Detail = ""
		}
	}
	return rep
}
