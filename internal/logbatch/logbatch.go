// Package logbatch is the form in which access-log batches are kept in a
// store (access_log: store): the lines as they are, or compressed.
//
// Compressed, a batch is a header and an S2 block (github.com/klauspost/compress/s2,
// Snappy's faster successor): the magic "\x00TSB" (no log line starts with
// a NUL: the log escapes control bytes), the format version 1, the
// CRC-32C of the lines, then the block. Log lines repeat most of their
// bytes, so a batch shrinks about tenfold, and the store writes, fsyncs
// (or keeps in Redis memory) a tenth as much; the CRC catches a batch
// damaged at rest, which the stores themselves do not check.
package logbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/klauspost/compress/s2"
)

var magic = []byte("\x00TSB")

const (
	version    = 1
	headerSize = 4 + 1 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt reports a stored batch that does not decode to what was stored.
var ErrCorrupt = errors.New("access-log batch is corrupt")

// Compress returns lines (whole '\n'-terminated log lines) in the
// compressed form, appended to dst[:0] when it has room.
func Compress(dst, lines []byte) []byte {
	need := headerSize + s2.MaxEncodedLen(len(lines))
	if cap(dst) < need {
		dst = make([]byte, need)
	}
	dst = dst[:need]
	copy(dst, magic)
	dst[4] = version
	binary.BigEndian.PutUint32(dst[5:], crc32.Checksum(lines, castagnoli))
	block := s2.Encode(dst[headerSize:], lines)
	return dst[:headerSize+len(block)]
}

// Decoder reads stored batches, reusing its buffer between them. The zero
// value is ready.
type Decoder struct{ buf []byte }

// Each calls fn for each line of a stored batch (compressed or not), as
// EachLine does; the line is valid only during the call.
func (d *Decoder) Each(stored []byte, fn func(line []byte) error) error {
	if !bytes.HasPrefix(stored, magic) {
		return EachLine(stored, fn)
	}
	if len(stored) < headerSize || stored[4] != version {
		return fmt.Errorf("%w: unknown header", ErrCorrupt)
	}
	n, err := s2.DecodedLen(stored[headerSize:])
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if cap(d.buf) < n {
		d.buf = make([]byte, n)
	}
	lines, err := s2.Decode(d.buf[:n], stored[headerSize:])
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if crc32.Checksum(lines, castagnoli) != binary.BigEndian.Uint32(stored[5:]) {
		return fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	return EachLine(lines, fn)
}

// EachLine calls fn for each '\n'-terminated line of batch, without the
// '\n' (a last line without one is passed too), and stops at fn's first error.
func EachLine(batch []byte, fn func(line []byte) error) error {
	for len(batch) > 0 {
		i := bytes.IndexByte(batch, '\n')
		if i < 0 {
			return fn(batch)
		}
		if err := fn(batch[:i]); err != nil {
			return err
		}
		batch = batch[i+1:]
	}
	return nil
}
