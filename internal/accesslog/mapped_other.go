//go:build !linux

package accesslog

import (
	"context"
	"errors"
	"sync/atomic"
)

// The mapped writer needs Linux (fallocate, MADV_POPULATE_WRITE); elsewhere
// use durability: async or sync (the buffered writer).
type mapped struct {
	failing atomic.Bool
	lastErr atomic.Pointer[string]
}

var errNoMapped = errors.New("access_log.durability: process needs Linux; use async or sync")

// OpenMapped reports that the mapped writer is not available here.
func OpenMapped(FileOptions, Options) (*Logger, *FileSink, error) { return nil, nil, errNoMapped }

func (*mapped) append(*Record, uint64) error { return errNoMapped }
func (*mapped) reopen() error                { return errNoMapped }
func (*mapped) close(context.Context) error  { return errNoMapped }
func (*mapped) stats() Stats                 { return Stats{} }
