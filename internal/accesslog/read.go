package accesslog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	hexenc "encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Reading the files back (the Kafka shipper, the reports).
//
// A file is known by its key: a hash of its first line. Lines are never
// changed once written, and renaming (rotation), compressing (gzip) or a
// crash-clean (which copies a file without its torn records, all of which
// lie past anything read) all keep the first line, so the key follows a
// file through every name it has. The first line holds the request's time
// to the microsecond, its client, its request id: two files do not share it.
//
// Reading the active file: the mapped writer reserves a record's bytes and
// copies the record in afterwards, so the file can hold a run of zeros (a
// copy still under way) before later records. Each byte goes from zero to
// its final value once, so a line is whole when it ends in a newline and
// holds no zero byte: a reader takes up to the first zero or the last
// newline, whichever comes first (WholeLines), and comes back for the rest.

// FileKeyLen is the length of a file's key in hex digits (64 bits of SHA-256).
const FileKeyLen = 16

// FileKey is the key of the file whose first line (with its newline) is first.
func FileKey(first []byte) string {
	sum := sha256.Sum256(first)
	return hexenc.EncodeToString(sum[:FileKeyLen/2])
}

// OpenLines opens a closed file for reading its lines from the start,
// decompressing a .gz one.
func OpenLines(path string) (io.ReadCloser, error) {
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

// SkipLines moves r, as OpenLines returned it, off bytes into the lines:
// a plain file seeks there, a compressed one is read past them. A file
// whose lines are fewer than off bytes is an error (io.ErrUnexpectedEOF).
//
// A reader resuming a closed file comes back at its end, where its last
// position in the active file was: read past byte by byte, a 512 MiB file
// costs a core a fraction of a second at every rotation.
func SkipLines(r io.Reader, off int64) error {
	if f, ok := r.(*os.File); ok {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if st.Size() < off {
			return fmt.Errorf("%d bytes: %w", st.Size(), io.ErrUnexpectedEOF)
		}
		_, err = f.Seek(off, io.SeekStart)
		return err
	}
	n, err := io.CopyN(io.Discard, r, off)
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("%d bytes: %w", n, io.ErrUnexpectedEOF)
	}
	return err
}

type gzFile struct {
	*gzip.Reader
	f *os.File
}

func (g *gzFile) Close() error {
	_ = g.Reader.Close()
	return g.f.Close()
}

// FirstLine reads a file's first whole line (with its newline), or nil if
// it has none yet.
func FirstLine(path string) ([]byte, error) {
	r, err := OpenLines(path)
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

// WholeLines returns the whole lines data starts with: up to the first zero
// byte (a record still being copied into the active file, or the space
// ahead) or the last newline, whichever comes first; nil if there is none.
func WholeLines(data []byte) []byte {
	if z := bytes.IndexByte(data, 0); z >= 0 {
		data = data[:z]
	}
	i := bytes.LastIndexByte(data, '\n')
	if i < 0 {
		return nil
	}
	return data[:i+1]
}

// FileKeys remembers the keys of closed files by name. A name can be used
// again once retention removed its file (the files of one second's size
// rotations are numbered, and the numbers come back), so an entry is
// believed only while the file under the name is the one it was read from
// (os.SameFile: the same device and inode, which a rename keeps). It is
// safe for concurrent use.
type FileKeys struct {
	mu sync.Mutex
	m  map[string]fileKey
}

type fileKey struct {
	key string
	id  os.FileInfo
}

// Key returns the key of the closed file dir/name, reading its first line
// unless it is remembered; "" if it has no whole line yet.
func (c *FileKeys) Key(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	fi, err := os.Stat(path)
	if err != nil {
		c.drop(name)
		return "", err
	}
	c.mu.Lock()
	e, ok := c.m[name]
	c.mu.Unlock()
	if ok && os.SameFile(e.id, fi) {
		return e.key, nil
	}
	first, err := FirstLine(path)
	if err != nil || first == nil {
		return "", err
	}
	key := FileKey(first)
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]fileKey{}
	}
	c.m[name] = fileKey{key: key, id: fi}
	c.mu.Unlock()
	return key, nil
}

// Known returns the remembered key of dir/name, if the file there is still
// the one it was read from; it reads nothing but the file's identity.
func (c *FileKeys) Known(dir, name string) (string, bool) {
	c.mu.Lock()
	e, ok := c.m[name]
	c.mu.Unlock()
	if !ok {
		return "", false
	}
	fi, err := os.Stat(filepath.Join(dir, name))
	if err != nil || !os.SameFile(e.id, fi) {
		return "", false
	}
	return e.key, true
}

// Retain forgets the names keep refuses and calls keep for each name it
// remembers with that name's key.
func (c *FileKeys) Retain(keep func(name, key string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, e := range c.m {
		if !keep(name, e.key) {
			delete(c.m, name)
		}
	}
}

func (c *FileKeys) drop(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}
