package logship

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"tsubame/internal/accesslog"
)

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
		if len(f.Key) != accesslog.FileKeyLen || f.Offset < 0 || f.Lines < 0 {
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
