package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"tsubame"
	"tsubame/internal/bulk"
	"tsubame/internal/config"
	"tsubame/internal/store/embedded"
)

// runCampaigns imports and exports the campaign file (internal/bulk).
// runCampaigns runs "tsubame campaigns import|export" with the format
// flag's value, -replace (import) and the file's name ("" or "-": the
// standard streams).
func runCampaigns(ctx context.Context, e *env, sub, format string, replace bool, file string) error {
	f, err := bulk.ParseCampaignFormat(format)
	if err != nil {
		return usagef("%v", err)
	}
	cfg, err := e.load()
	if err != nil {
		return err
	}
	store, err := openCampaignStore(ctx, cfg, sub == "export", e.stderr)
	if err != nil {
		return err
	}
	defer store.Close()
	if sub == "import" {
		return importCampaigns(ctx, store, file, f, replace, e.stdin, e.stderr)
	}
	return exportCampaigns(ctx, store, file, f, e.stdout, e.stderr)
}

// campaignFiles is what the campaign commands need: the configured store,
// or, while a server holds the embedded store, that server (serverAPI).
type campaignFiles interface {
	// Import resolves the campaign file in (merge, or replace) against the
	// stored set and writes the result whole, or reports every problem and
	// writes nothing. It returns the file's and the stored set's counts.
	Import(ctx context.Context, in io.Reader, name string, format bulk.CampaignFormat, replace bool) (file, stored map[string]int, err error)
	// Stored returns the stored set.
	Stored(ctx context.Context) (*tsubame.CampaignSet, error)
	Close() error
}

// ownCampaigns is the configured store, opened by this process.
type ownCampaigns struct {
	io.Closer
	cs  tsubame.CampaignStore
	cfg *config.Config
}

// openCampaignStore opens the configured store for the campaign commands,
// or, while a server holds the embedded store, reaches that server
// through its control socket.
func openCampaignStore(ctx context.Context, cfg *config.Config, readOnly bool, stderr io.Writer) (campaignFiles, error) {
	s, err := openOwnStore(cfg, readOnly)
	if errors.Is(err, embedded.ErrInUse) {
		route := "POST /api/v1/campaigns/import"
		if readOnly {
			route = "GET /api/v1/campaigns/export"
		}
		return viaServer(ctx, cfg, err, "use its admin API ("+route+" on "+cfg.Admin.Listen+")", stderr)
	}
	if err != nil {
		return nil, err
	}
	cs, ok := s.(tsubame.CampaignStore)
	if !ok {
		_ = s.Close()
		return nil, usagef("store type %q keeps no campaigns", cfg.Store.Type)
	}
	return ownCampaigns{Closer: s, cs: cs, cfg: cfg}, nil
}

// importCampaigns imports a campaign file (name, or standard input for
// "-") and says what the store holds now.
func importCampaigns(ctx context.Context, store campaignFiles, name string, format bulk.CampaignFormat,
	replace bool, stdin io.Reader, stderr io.Writer) error {
	in := stdin
	if name != "-" {
		file, err := os.Open(name)
		if err != nil {
			return err
		}
		defer file.Close()
		in = file
		if format == bulk.CampaignsAuto {
			format = bulk.CampaignFormatOf(name)
		}
	}
	imported, stored, err := store.Import(ctx, in, name, format, replace)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "imported %s (%s): %s\nthe store holds %s\n", name, importMode(replace), bulk.DescribeCounts(imported),
		bulk.DescribeCounts(stored))
	return nil
}

func importMode(replace bool) string {
	if replace {
		return "replace"
	}
	return "merge"
}

// Import reads the file, resolves it against the stored set and writes
// the result, then audits the import.
func (o ownCampaigns) Import(ctx context.Context, in io.Reader, name string, format bulk.CampaignFormat, replace bool) (file, stored map[string]int, err error) {
	f, err := bulk.ReadCampaignsContext(ctx, in, name, format)
	if err != nil {
		return nil, nil, err
	}
	// Another process (a server on Redis) may write meanwhile: Write
	// keeps those writes, or refuses the import if it would undo one.
	set, err := f.Write(ctx, o.cs, replace)
	if err != nil {
		return nil, nil, err
	}
	file, stored = bulk.CampaignCounts(f.Set), bulk.CampaignCounts(set)
	return file, stored, auditCLI(o.cfg, importMode(replace)+": "+bulk.DescribeCounts(file), "campaigns.import")
}

// Stored returns the stored set.
func (o ownCampaigns) Stored(ctx context.Context) (*tsubame.CampaignSet, error) {
	set, _, err := o.cs.Snapshot(ctx)
	return set, err
}

// exportCampaigns writes the stored set to a file (atomically) or standard
// output.
func exportCampaigns(ctx context.Context, store campaignFiles, name string, format bulk.CampaignFormat, stdout, stderr io.Writer) error {
	if format == bulk.CampaignsAuto {
		format = bulk.CampaignFormatOf(name)
	}
	set, err := store.Stored(ctx)
	if err != nil {
		return err
	}
	counts := bulk.DescribeCounts(bulk.CampaignCounts(set))
	if name == "" || name == "-" {
		if err := bulk.WriteCampaigns(stdout, set, format); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "exported %s\n", counts)
		return nil
	}
	if _, err := writeFileAtomically(name, func(w io.Writer) (int, error) {
		return set.Len(), bulk.WriteCampaigns(w, set, format)
	}); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "exported %s to %s\n", counts, name)
	return nil
}
