package main

import (
	"fmt"
	"io"
)

func runCheckConfig(args []string, stdout, stderr io.Writer, environ []string) error {
	fs, path := newFlagSet("check-config", stderr)
	show := fs.Bool("print", false, "print the effective configuration")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path, environ, stderr)
	if err != nil {
		return err
	}
	if *show {
		if err := printConfig(stdout, cfg); err != nil {
			return err
		}
	}
	fmt.Fprintln(stderr, "configuration ok")
	return nil
}
