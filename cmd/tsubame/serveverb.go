package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	"golang.org/x/term"
)

// setProcs adds extra scheduler run queues (server.extra_procs) to the
// CPUs the process may use, unless the GOMAXPROCS environment variable
// sets them itself.
func setProcs(extra int, environ []string, logger *slog.Logger) {
	if v := cmp.Or(lookupEnv(environ, "GOMAXPROCS"), os.Getenv("GOMAXPROCS")); v != "" {
		logger.Info("scheduler", "gomaxprocs", runtime.GOMAXPROCS(0), "from", "GOMAXPROCS")
		return
	}
	// Go's default, the cgroup's CPU limit else the CPUs, whatever an
	// earlier server of the process (a test's) set.
	runtime.SetDefaultGOMAXPROCS()
	cpus := runtime.GOMAXPROCS(0)
	if extra > 0 {
		runtime.GOMAXPROCS(cpus + extra)
	}
	logger.Info("scheduler", "gomaxprocs", runtime.GOMAXPROCS(0), "cpus", cpus, "extra_procs", extra)
}

func runServe(ctx context.Context, e *env, demo bool) error {
	stderr, environ := e.stderr, e.environ
	e.logWarnings = true
	cfg, err := e.load()
	if err != nil {
		for _, w := range e.warnings {
			fmt.Fprintf(stderr, "tsubame: warning: %s\n", w)
		}
		return err
	}
	logger, level, bounded := newLogger(cfg, stderr)
	for _, w := range e.warnings {
		logger.Warn(w)
	}
	// Before anything sizes itself by GOMAXPROCS (the access log's shards).
	setProcs(cfg.Server.ExtraProcs, environ, logger)
	// One format for every line of the process: what libraries write
	// through the standard log package goes through the same handler.
	slog.SetDefault(logger)
	// The counts of repeated lines are written every interval, and at exit.
	logCtx, stopLog := context.WithCancel(context.Background())
	logDone := make(chan struct{})
	go func() { bounded.Run(logCtx); close(logDone) }()
	defer func() { stopLog(); <-logDone }()
	m := &Main{Config: cfg, Logger: logger, Level: level, Demo: demo}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		m.Console = stderr // the bootstrap token is shown there
	}
	m.run.exe = launchPath()
	if m.run.handover, err = inherited(environ); err != nil {
		return err
	}
	// The watchdog runs from the start: a successor is the main process
	// from before its predecessor has drained until it exits.
	sup := newSupervisor(m.Logger, environ)
	sup.watchdog(ctx)
	// The handlers are in place before the pid file and READY=1 say the
	// server is up: a SIGHUP or SIGUSR2 sent on seeing them must not meet
	// the default action (which ends the process). One that comes while
	// opening waits in its channel and is handled once serving.
	//
	// SIGHUP reopens the access log (for external rotation such as
	// logrotate) and reloads the configuration.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// SIGUSR2 starts a successor and hands over to it (restart.go).
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	defer signal.Stop(usr2)
	if err := m.Open(ctx); err != nil {
		return err
	}
	if m.run.handover != nil {
		m.Logger.Info("took over from the previous process")
	}
	pidFile := filepath.Join(cfg.DataDir, PIDFile)
	if err := writePIDFile(pidFile); err != nil {
		m.Logger.Warn("cannot write pid file; tsubame log reopen will not find this server", "file", pidFile, "err", err)
	}
	defer removePIDFile(pidFile)
	statusFile := filepath.Join(cfg.DataDir, StatusFile)
	status := processStatus{PID: os.Getpid(), Version: version, Exe: m.run.exe}
	if err := writeStatus(statusFile, status); err != nil {
		m.Logger.Warn("cannot write the status file; tsubame restart will not see a failed restart at once", "file", statusFile, "err", err)
	}
	sup.ready("serving", os.Getpid())

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var succ *successor
	go func() {
		for {
			select {
			case <-hup:
				sup.reloading("reloading the configuration")
				status := m.hangup(ctx, e.configPath, environ)
				sup.ready(status, os.Getpid())
			case <-usr2:
				m.Logger.Info("restart requested: starting the new process")
				sup.reloading("starting the new process")
				if l := m.logs.file; l != nil {
					// While the new process starts: the handover's
					// close of the log then has little left to sync.
					go l.WriteBack()
				}
				s, err := m.startSuccessor(os.Args[1:], environ, os.Stdout, os.Stderr)
				if err != nil {
					m.Logger.Error("restart failed; this process keeps serving", "err", err)
					status.RestartFailed, status.RestartAt = err.Error(), time.Now().UTC()
					if err := writeStatus(statusFile, status); err != nil {
						m.Logger.Warn("cannot write the status file", "file", statusFile, "err", err)
					}
					sup.ready("serving; the last restart failed: "+err.Error(), os.Getpid())
					continue
				}
				// Before draining: this process is still the main one, and
				// systemd must follow the successor before this one exits.
				sup.handingOver(s.cmd.Process.Pid)
				succ = s
				stopRun()
				return
			case <-runCtx.Done():
				return
			}
		}
	}()
	waitErr := m.Wait(runCtx)
	if succ != nil {
		m.Logger.Info("handing over to the new process", "pid", succ.cmd.Process.Pid)
		h := succ.handoff(m.Logger)
		if h != nil {
			m.pub.server.SetHandoff(h)
		}
		m.run.leaving = m.sameReports(e.configPath, environ)
		closeErr := m.Close()
		if h != nil {
			n, err := h.Close()
			m.Logger.Info("idle connections handed over", "connections", n)
			if err != nil {
				m.Logger.Warn("some idle connections were closed after the grace instead of handed over", "err", err)
			}
		}
		succ.release()
		if closeErr != nil {
			return closeErr
		}
		m.Logger.Info("handed over")
		return nil
	}
	m.Logger.Info("shutting down", "timeout", cfg.Server.ShutdownTimeout)
	sup.stopping()
	closeErr := m.Close()
	if err := errors.Join(waitErr, closeErr); err != nil {
		return err
	}
	m.Logger.Info("stopped")
	return nil
}

// hangup handles SIGHUP: reopen the access log, then reload the
// configuration from where it was first read. A configuration with errors
// is rejected, each error logged, and the running one stays. It returns a
// one-line status for the service manager.
func (m *Main) hangup(ctx context.Context, path string, environ []string) string {
	if err := m.ReopenLogs(ctx); err != nil {
		m.Logger.Error("reopening the access log failed", "err", err)
	} else {
		m.Logger.Info("access log reopened")
	}
	// As at the start: the loader's warnings and the configuration's risks.
	cfg, warnings, err := loadConfigWarnings(path, environ)
	for _, w := range warnings {
		m.Logger.Warn(w)
	}
	if err != nil {
		m.Logger.Error("configuration not reloaded; the running one stays", "err", err)
		return "serving; the last reload was refused (see the log)"
	}
	restart, err := m.Reload(cfg)
	if err != nil {
		m.Logger.Error("configuration not reloaded; the running one stays", "err", err)
		return "serving; the last reload was refused (see the log)"
	}
	m.Logger.Info("configuration reloaded", "endpoints", len(cfg.Endpoints))
	if len(restart) > 0 {
		m.Logger.Warn("changed keys that take effect only after a restart (SIGUSR2 or tsubame restart)", "keys", restart)
		return "serving; reloaded, some changes wait for a restart"
	}
	return "serving; reloaded"
}

// sameReports says whether a successor started with the configuration at
// path, read again here as it read it, rolls the same access-log files up
// into the same reports as this process: only then is the count of this
// one's last lines left to it (report.Roller.Leave). A successor with the
// reports off, or over other files or another database, would never
// count them; this process counts and commits them then, as at a stop.
func (m *Main) sameReports(path string, environ []string) bool {
	next, _, err := loadConfigWarnings(path, environ)
	if err != nil {
		return false
	}
	m.mu.Lock()
	cur := m.Config
	m.mu.Unlock()
	a, b := reportOptions(cur, nil, nil), reportOptions(next, nil, nil)
	return cur.Report.Enabled && next.Report.Enabled &&
		a.Dir == b.Dir && a.Name == b.Name && a.Path == b.Path && a.Node == b.Node &&
		cur.Store.Type == next.Store.Type && cur.Store.Redis.KeyPrefix == next.Store.Redis.KeyPrefix &&
		slices.Equal(cur.Store.Redis.Addrs, next.Store.Redis.Addrs)
}
