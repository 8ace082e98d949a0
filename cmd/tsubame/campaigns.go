package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"tsubame"
	"tsubame/internal/bulk"
	"tsubame/internal/config"
)

// runCampaigns imports and exports the campaign file (internal/bulk).
func runCampaigns(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, environ []string) error {
	if len(args) == 0 {
		return usagef("campaigns needs a subcommand: import or export")
	}
	sub, args := args[0], args[1:]
	fs, path := newFlagSet("campaigns "+sub, stderr)
	format := fs.String("format", "", "file format: json or yaml (default: the file's extension; import reads either from standard input, export writes JSON)")
	replace := new(bool)
	switch sub {
	case "import":
		replace = fs.Bool("replace", false, "make the store hold exactly the file's objects (default: merge the file into the stored set)")
	case "export":
	default:
		return usagef("unknown campaigns subcommand %q: want import or export", sub)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := bulk.ParseCampaignFormat(*format)
	if err != nil {
		return usagef("%v", err)
	}
	if fs.NArg() > 1 || sub == "import" && fs.NArg() != 1 {
		if sub == "import" {
			return usagef("usage: tsubame campaigns import [-config FILE] [-format json|yaml] [-replace] FILE|-")
		}
		return usagef("usage: tsubame campaigns export [-config FILE] [-format json|yaml] [FILE|-]")
	}
	cfg, err := loadConfig(*path, environ, stderr)
	if err != nil {
		return err
	}
	store, cs, err := openCampaignStore(cfg, sub == "export")
	if err != nil {
		return err
	}
	defer store.Close()
	if sub == "import" {
		return importCampaigns(ctx, cfg, cs, fs.Arg(0), f, *replace, stdin, stderr)
	}
	return exportCampaigns(ctx, cs, fs.Arg(0), f, stdout, stderr)
}

// openCampaignStore opens the configured store for the campaign commands;
// while a server holds the embedded store, the error names the admin API
// route that does the same.
func openCampaignStore(cfg *config.Config, readOnly bool) (io.Closer, tsubame.CampaignStore, error) {
	s, err := openCLIStore(cfg, readOnly)
	if tsubame.ErrorCode(err) == tsubame.ECONFLICT && cfg.Store.Type == "embedded" {
		route := "POST /api/v1/campaigns/import"
		if readOnly {
			route = "GET /api/v1/campaigns/export"
		}
		return nil, nil, tsubame.Errorf(tsubame.ECONFLICT, "store %q is in use by another process (a running tsubame server?): stop that server, or use its admin API (%s on %s)",
			cfg.StorePath(), route, cfg.Admin.Listen)
	}
	if err != nil {
		return nil, nil, err
	}
	cs, ok := s.(tsubame.CampaignStore)
	if !ok {
		_ = s.Close()
		return nil, nil, usagef("store type %q keeps no campaigns", cfg.Store.Type)
	}
	return s, cs, nil
}

// importCampaigns reads a campaign file, resolves it against the stored set
// (merge, or replace) and writes the result whole, or reports every problem
// and writes nothing.
func importCampaigns(ctx context.Context, cfg *config.Config, cs tsubame.CampaignStore, name string, format bulk.CampaignFormat,
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
	file, err := bulk.ReadCampaigns(in, name, format)
	if err != nil {
		return err
	}
	base, version, err := cs.Snapshot(ctx)
	if err != nil {
		return err
	}
	set, err := file.Resolve(base, replace)
	if err != nil {
		return err
	}
	// Another process (a server on Redis) may have written meanwhile: the
	// file was checked against a set that is gone.
	if now, err := cs.CampaignsVersion(ctx); err != nil {
		return err
	} else if now != version {
		return tsubame.Errorf(tsubame.ECONFLICT, "the stored campaigns changed while %s was checked: import it again", name)
	}
	if err := cs.ReplaceAll(ctx, set); err != nil {
		return err
	}
	mode := "merge"
	if replace {
		mode = "replace"
	}
	imported := bulk.DescribeCounts(bulk.CampaignCounts(file.Set))
	fmt.Fprintf(stderr, "imported %s (%s): %s\nthe store holds %s\n", name, mode, imported, bulk.DescribeCounts(bulk.CampaignCounts(set)))
	return auditCLI(cfg, mode+": "+imported, "campaigns.import")
}

// exportCampaigns writes the stored set to a file (atomically) or standard
// output.
func exportCampaigns(ctx context.Context, cs tsubame.CampaignStore, name string, format bulk.CampaignFormat, stdout, stderr io.Writer) error {
	if format == bulk.CampaignsAuto {
		format = bulk.CampaignFormatOf(name)
	}
	set, _, err := cs.Snapshot(ctx)
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
