package main

import (
	"fmt"
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
