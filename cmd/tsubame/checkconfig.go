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
	fmt.Fprintln(e.stderr, "configuration ok")
	return nil
}
