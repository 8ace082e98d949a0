package webhook

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// deadLetters appends messages that could not be processed to a JSON lines
// file, one per line, for inspection and replay; the file is created with
// the first one. It is safe for concurrent use.
type deadLetters struct {
	mu     sync.Mutex
	path   string
	f      *os.File
	n      int
	closed bool
}

type deadLetter struct {
	*Message
	Error    string    `json:"error"`
	Attempts int       `json:"attempts"`
	At       time.Time `json:"at"`
}

func openDeadLetters(path string) (*deadLetters, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("cannot create dead-letter directory: %w", err)
	}
	return &deadLetters{path: path}, nil
}

// add writes one dead letter. The file is fsynced on close; a write error
// is returned so the caller can report the message elsewhere.
func (d *deadLetters) add(m *Message, cause error, attempts int) error {
	line, err := json.Marshal(deadLetter{Message: m, Error: cause.Error(), Attempts: attempts, At: time.Now().UTC()})
	if err != nil {
		return err
	}
	line = append(line, '\n')
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("dead-letter file %s is closed", d.path)
	}
	if d.f == nil {
		if d.f, err = os.OpenFile(d.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640); err != nil {
			return fmt.Errorf("cannot open dead-letter file: %w", err)
		}
	}
	if _, err := d.f.Write(line); err != nil {
		return fmt.Errorf("cannot write dead-letter file %s: %w", d.path, err)
	}
	d.n++
	return nil
}

func (d *deadLetters) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.f == nil {
		return nil
	}
	err := d.f.Sync()
	if cerr := d.f.Close(); err == nil {
		err = cerr
	}
	d.f = nil
	return err
}
