package main

import (
	"io"
	"log/slog"
	"os"
	"runtime"
	"testing"
)

// server.extra_procs adds scheduler run queues to Go's default, the same
// whatever an earlier server of the process set, and the GOMAXPROCS
// environment variable wins over it. Not parallel: GOMAXPROCS is the
// process's.
func TestSetProcs(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set in this test's environment, which setProcs leaves to it")
	}
	t.Cleanup(runtime.SetDefaultGOMAXPROCS)
	runtime.SetDefaultGOMAXPROCS()
	def := runtime.GOMAXPROCS(0)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		extra   int
		environ []string
		want    int
	}{
		{1, nil, def + 1},
		{1, nil, def + 1}, // again: not def + 2
		{3, []string{"PATH=/bin"}, def + 3},
		{0, nil, def},
		{2, []string{"GOMAXPROCS=7"}, def}, // left as it was
	} {
		setProcs(c.extra, c.environ, quiet)
		if got := runtime.GOMAXPROCS(0); got != c.want {
			t.Errorf("extra_procs %d, environment %q: GOMAXPROCS %d, want %d (the default %d)", c.extra, c.environ, got, c.want, def)
		}
	}
}
