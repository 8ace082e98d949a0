package main

import (
	"fmt"

	"tsubame/internal/ssp"
)

func runCheckConfig(e *env, show bool) error {
	cfg, err := e.load()
	if err != nil {
		return err
	}
	if show {
		if err := printConfig(e.stdout, cfg); err != nil {
			return err
		}
	}
	for _, n := range cfg.Notices() {
		fmt.Fprintf(e.stderr, "tsubame: note: %s\n", n)
	}
	fmt.Fprintln(e.stderr, "configuration ok")
	return nil
}

// runAdsTxt prints each publisher's ads.txt line for this seller.
func runAdsTxt(e *env) error {
	cfg, err := e.load()
	if err != nil {
		return err
	}
	lines := ssp.AdsTxt(&cfg.SSP)
	if len(lines) == 0 {
		return usagef("ssp.publishers: none configured")
	}
	if cfg.SSP.Seller.Domain == "" {
		return usagef("ssp.seller.domain: needed (the first field of each line)")
	}
	for _, l := range lines {
		fmt.Fprintf(e.stdout, "# %s (%s)\n%s\n", l.Publisher, l.Domain, l.Line)
	}
	return nil
}
