package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"tsubame"
	"tsubame/internal/bulk"
	"tsubame/internal/config"
	"tsubame/internal/store/embedded"
)

// placementFlags are the flags of the placements commands.
type placementFlags struct {
	format string     // import
	name   string     // put
	deps   stringList // put
}

// runPlacements runs "tsubame placements SUB" with its arguments, counted
// by the command table.
func runPlacements(ctx context.Context, e *env, sub string, f *placementFlags, args []string) error {
	cfg, err := e.load()
	if err != nil {
		return err
	}
	readOnly := sub == "export" || sub == "get"
	store, err := openPlacementStore(ctx, cfg, readOnly, e.stderr)
	if err != nil {
		return err
	}
	defer store.Close()

	switch sub {
	case "import":
		return importPlacements(ctx, store, args, f.format, e.stdin, e.stderr)
	case "export":
		return exportPlacements(ctx, store, args, e.stdout, e.stderr)
	case "get":
		p, err := store.Get(ctx, args[0])
		if err != nil {
			return err
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	case "put":
		p := &tsubame.Placement{ID: args[0], URLs: args[1:], Name: f.name, Deps: f.deps}
		if err := store.Put(ctx, p); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "placement %q saved\n", p.ID)
		return nil
	default: // delete
		if err := store.Delete(ctx, args[0]); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "placement %q deleted\n", args[0])
		return nil
	}
}

// placementStore is what the placements commands need: the configured
// store, or, while a server holds the embedded store, that server
// (serverAPI). Implementations must be safe for concurrent use.
type placementStore interface {
	Get(ctx context.Context, id string) (*tsubame.Placement, error)
	Put(ctx context.Context, p *tsubame.Placement) error
	PutMany(ctx context.Context, ps []*tsubame.Placement) error
	Delete(ctx context.Context, id string) error
	// Export writes every placement to w as JSON lines, in id order, and
	// returns how many it wrote.
	Export(ctx context.Context, w io.Writer) (int, error)
	Close() error
}

// ownStore is the configured store, opened by this process.
type ownStore struct{ tsubame.Store }

func (s ownStore) Export(ctx context.Context, w io.Writer) (int, error) {
	return bulk.Write(ctx, w, s.Store)
}

// openPlacementStore opens the configured store, or, while a server holds
// the embedded store, reaches that server through its control socket.
func openPlacementStore(ctx context.Context, cfg *config.Config, readOnly bool, stderr io.Writer) (placementStore, error) {
	s, err := openOwnStore(cfg, readOnly)
	if errors.Is(err, embedded.ErrInUse) {
		return viaServer(ctx, cfg, err, "use its admin API (/api/v1/placements on "+cfg.Admin.Listen+")", stderr)
	}
	if err != nil {
		return nil, err
	}
	return ownStore{s}, nil
}

// openOwnStore opens the configured store in this process; while another
// holds the embedded store, the error is embedded.ErrInUse's.
func openOwnStore(cfg *config.Config, readOnly bool) (tsubame.Store, error) {
	if cfg.Store.Type == "memory" {
		return nil, usagef("store.type is memory: its data lives inside a running server; there is nothing to manage from here")
	}
	if readOnly && cfg.Store.Type == "embedded" {
		if _, err := os.Stat(cfg.StorePath()); os.IsNotExist(err) {
			return nil, tsubame.Errorf(tsubame.ENOTFOUND, "no store at %s yet (run tsubame serve or import first)", cfg.StorePath())
		}
	}
	return openStore(cfg, readOnly)
}

func importPlacements(ctx context.Context, store placementStore, args []string, format string, stdin io.Reader, stderr io.Writer) error {
	f, err := bulk.ParseFormat(format)
	if err != nil {
		return usagef("%v", err)
	}
	in, label := stdin, "standard input"
	if len(args) == 1 && args[0] != "-" {
		file, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer file.Close()
		in, label = file, args[0]
	}
	ps, err := bulk.Read(in, f)
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	start := time.Now()
	if err := store.PutMany(ctx, ps); err != nil {
		return err
	}
	d := time.Since(start)
	fmt.Fprintf(stderr, "imported %d placement(s) from %s in %v (%.0f/s)\n", len(ps), label, d.Round(time.Millisecond),
		float64(len(ps))/max(d.Seconds(), 1e-9))
	return nil
}

func exportPlacements(ctx context.Context, store placementStore, args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && args[0] != "-" {
		n, err := writeFileAtomically(args[0], func(w io.Writer) (int, error) { return store.Export(ctx, w) })
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "exported %d placement(s) to %s\n", n, args[0])
		return nil
	}
	n, err := store.Export(ctx, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "exported %d placement(s)\n", n)
	return nil
}

// writeFileAtomically writes target through write: into a file beside it,
// fsynced, then renamed, so a failed export never leaves a truncated file
// under the final name. It returns what write counted.
func writeFileAtomically(target string, write func(w io.Writer) (int, error)) (int, error) {
	tmp, err := os.CreateTemp(filepath.Dir(target), ".tsubame-export-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	n, err := write(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), target)
	}
	return n, err
}
