package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/store/embedded"
)

// runLogExport writes the access-log lines kept in the store (access_log:
// store), one per line, oldest first: to FILE (see writeFileAtomically)
// or standard output.
func runLogExport(ctx context.Context, e *env, target string) error {
	stdout, stderr := e.stdout, e.stderr
	cfg, err := e.load()
	if err != nil {
		return err
	}
	store, err := openOwnStore(cfg, true)
	if errors.Is(err, embedded.ErrInUse) {
		// The store's access log is read only by a process of its own.
		return tsubame.Errorf(tsubame.ECONFLICT, "%s: the access log in the embedded store is exported with the server stopped "+
			"(systemctl stop tsubame; tsubame log export FILE; systemctl start tsubame)", tsubame.ErrorMessage(err))
	}
	if err != nil {
		return err
	}
	defer store.Close()
	ls, ok := store.(accesslog.LogStore)
	if !ok {
		return usagef("store type %q holds no access log", cfg.Store.Type)
	}
	if target == "" || target == "-" {
		n, err := exportLog(ctx, ls, stdout)
		if err == nil {
			fmt.Fprintf(stderr, "exported %d line(s)\n", n)
		}
		return err
	}
	n, err := writeFileAtomically(target, func(w io.Writer) (int, error) { return exportLog(ctx, ls, w) })
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "exported %d line(s) to %s\n", n, target)
	return nil
}

func exportLog(ctx context.Context, ls accesslog.LogStore, w io.Writer) (int, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	n := 0
	err := ls.ScanLog(ctx, func(line []byte) error {
		n++
		if _, err := bw.Write(line); err != nil {
			return err
		}
		return bw.WriteByte('\n')
	})
	if err == nil {
		err = bw.Flush()
	}
	return n, err
}
