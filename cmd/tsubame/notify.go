package main

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// supervisor tells a service manager (systemd's Type=notify, sd_notify(3))
// what the server is doing: READY=1 once serving, RELOADING=1 and READY=1
// around a SIGHUP reload, STOPPING=1 on shutdown, and MAINPID= on a
// SIGUSR2 handover so that systemd follows the successor. Without
// NOTIFY_SOCKET in the environment every call does nothing.
//
// The handover is ordered so that it works under systemd's default
// NotifyAccess=main, where only the main process is heard: the predecessor
// (still main) announces MAINPID=<successor> before it drains and exits,
// and the successor says READY=1 only after the predecessor has released
// the store, by which time it is main.
type supervisor struct {
	log *slog.Logger
	on  bool
}

func newSupervisor(log *slog.Logger, environ []string) *supervisor {
	return &supervisor{log: log, on: lookupEnv(environ, "NOTIFY_SOCKET") != ""}
}

func (s *supervisor) notify(states ...string) {
	if !s.on {
		return
	}
	if _, err := daemon.SdNotify(false, strings.Join(states, "\n")); err != nil {
		s.log.Warn("cannot notify the service manager", "err", err)
	}
}

// ready says the server serves. A successor names itself the main process
// too, for managers that hear every process (NotifyAccess=all).
func (s *supervisor) ready(status string, pid int) {
	s.notify("MAINPID="+strconv.Itoa(pid), daemon.SdNotifyReady, "STATUS="+status)
}

// reloading starts a reload or a handover; ready ends it.
func (s *supervisor) reloading(status string) {
	s.notify(daemon.SdNotifyReloading, "MONOTONIC_USEC="+strconv.FormatInt(monotonicMicros(), 10), "STATUS="+status)
}

// handingOver names the successor as the main process.
func (s *supervisor) handingOver(pid int) {
	s.notify("MAINPID="+strconv.Itoa(pid), "STATUS=handing over to process "+strconv.Itoa(pid))
}

func (s *supervisor) stopping() {
	s.notify(daemon.SdNotifyStopping, "STATUS=draining and stopping")
}

// watchdog answers systemd's WatchdogSec= (WATCHDOG_USEC) at half its
// interval until ctx ends. The runtime staying responsive is what it
// proves: a deadlocked or wedged process misses pings and is restarted.
func (s *supervisor) watchdog(ctx context.Context) {
	if !s.on {
		return
	}
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		s.log.Warn("ignoring the service manager's watchdog setting", "err", err)
		return
	}
	if interval <= 0 {
		return
	}
	go func() {
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.notify(daemon.SdNotifyWatchdog)
			case <-ctx.Done():
				return
			}
		}
	}()
}

// monotonicMicros is CLOCK_MONOTONIC in microseconds, which systemd 253+
// wants beside RELOADING=1.
func monotonicMicros() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Sec*1_000_000 + ts.Nsec/1_000
}
