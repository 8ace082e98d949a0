package logship

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// A file is known by its key: a hash of its first line. Lines are never
// changed once written, and renaming (rotation), compressing (gzip) or a
// crash-clean (which copies a file without its torn records, all of which
// lie past anything shipped) all keep the first line, so the key follows a
// file through every name it has. The first line holds the request's time
// to the microsecond, its client, its request id: two files do not share it.

// keyLen is the length of a key in hex digits (64 bits of SHA-256).
const keyLen = 16

func lineKey(first []byte) string {
	sum := sha256.Sum256(first)
	return hex.EncodeToString(sum[:keyLen/2])
}

// fileState is how far Kafka has acknowledged one file.
type fileState struct {
	Key    string `json:"key"`
	Name   string `json:"name"`   // the name it had when last seen (for people)
	Offset int64  `json:"offset"` // bytes acknowledged, from the start (uncompressed)
	Lines  int64  `json:"lines"`  // lines acknowledged
	Done   bool   `json:"done"`   // closed and every line acknowledged
}

type stateFile struct {
	Version int          `json:"version"`
	Node    string       `json:"node"`
	Files   []*fileState `json:"files"`
}

const stateVersion = 1

func loadState(path string) (map[string]*fileState, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]*fileState{}, nil
	}
	if err != nil {
		return nil, err
	}
	var sf stateFile
	if err := json.Unmarshal(b, &sf); err != nil {
		return nil, fmt.Errorf("shipper state file %s is damaged (%v); move it away to ship every file again", path, err)
	}
	if sf.Version != stateVersion {
		return nil, fmt.Errorf("shipper state file %s has version %d, this build reads %d", path, sf.Version, stateVersion)
	}
	out := make(map[string]*fileState, len(sf.Files))
	for _, f := range sf.Files {
		if len(f.Key) != keyLen || f.Offset < 0 || f.Lines < 0 {
			return nil, fmt.Errorf("shipper state file %s: bad entry %+v", path, *f)
		}
		out[f.Key] = f
	}
	return out, nil
}

// saveState writes the state atomically: a temporary file, fsynced, renamed
// over the old one, and the directory fsynced.
func saveState(path, node string, files []*fileState) error {
	b, err := json.MarshalIndent(stateFile{Version: stateVersion, Node: node, Files: files}, "", " ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// openLines opens a closed file for reading its lines from the start,
// decompressing a .gz one.
func openLines(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(path, ".gz") {
		return f, nil
	}
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &gzFile{Reader: zr, f: f}, nil
}

type gzFile struct {
	*gzip.Reader
	f *os.File
}

func (g *gzFile) Close() error {
	_ = g.Reader.Close()
	return g.f.Close()
}

// firstLine reads a file's first whole line (with its newline), or nil if
// it has none yet.
func firstLine(path string) ([]byte, error) {
	r, err := openLines(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	br := bufio.NewReaderSize(r, 16<<10)
	line, err := br.ReadSlice('\n')
	switch {
	case err == nil && bytes.IndexByte(line, 0) >= 0:
		return nil, nil // the active file's first record is still being copied in
	case err == nil:
		return append([]byte(nil), line...), nil
	case errors.Is(err, io.EOF):
		return nil, nil
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, fmt.Errorf("%s: first line longer than %d bytes", path, br.Size())
	}
	return nil, err
}
