package report

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"
)

// The database: one bbolt file.
//
//	meta       schema: "1"; compacted: 8 bytes, the Unix second before
//	           which rows are quarter-hours (a quarter's start, or 0)
//	files      a file's key → its fileState (JSON)
//	minutes    row key → counts, for rows from compacted on
//	quarters   row key → counts, for rows before compacted
//	forgotten  a file read whole and gone for a while → its first line's time
//
// A row key is its bucket's start (Unix seconds, big-endian 8 bytes) and
// each dimension's value prefixed by its length (one byte); counts are the
// number of counters and each counter, as varints, so a build that adds a
// counter reads the rows of one that had fewer.
var (
	bucketMeta     = []byte("meta")
	bucketFiles    = []byte("files")
	bucketMinutes  = []byte("minutes")
	bucketQuarters = []byte("quarters")
	// bucketForgotten holds tombstones: a file read whole and gone, by
	// key → the time of its first line.
	bucketForgotten = []byte("forgotten")
	keySchema       = []byte("schema")
	keyCompacted    = []byte("compacted")
	schemaVersion   = []byte("1")
)

// quarter is the coarse bucket: every time zone's offset is a multiple of
// it, so hours and days in any zone are sums of quarters.
const quarter = 15 * time.Minute

// maxDimLen bounds a stored dimension value (one length byte); the ids an
// event line carries are shorter (track.MaxIDLen, MaxSiteLen).
const maxDimLen = 255

// fileState is how far the rollups have read one file of the access log.
type fileState struct {
	Name   string `json:"name"`   // the name it had when last read (for people)
	Offset int64  `json:"offset"` // bytes read, from the start (uncompressed)
	Lines  int64  `json:"lines"`  // lines read
	Done   bool   `json:"done"`   // closed and read to its end
	// GoneAt is when it was first missing from the directory (retention
	// removed it); zero while it is there.
	GoneAt time.Time `json:"gone_at,omitzero"`
	// First is the time of its first line: a recount of the files that are
	// left covers the times from the first one's on.
	First time.Time `json:"first"`
	// Events is how many lines of it were counted (event lines, refused
	// notices): a check of Verify's.
	Events int64 `json:"events"`
}

func rowKey(dst []byte, t int64, d *Dims) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(t))
	for _, v := range d {
		if len(v) > maxDimLen {
			v = v[:maxDimLen]
		}
		dst = append(dst, byte(len(v)))
		dst = append(dst, v...)
	}
	return dst
}

var errRowKey = errors.New("damaged row key")

func parseRowKey(k []byte, d *Dims) (int64, error) {
	if len(k) < 8 {
		return 0, errRowKey
	}
	t := int64(binary.BigEndian.Uint64(k))
	k = k[8:]
	for i := range d {
		if len(k) == 0 {
			d[i] = "" // a row stored before this dimension was added
			continue
		}
		if int(k[0]) > len(k)-1 {
			return 0, errRowKey
		}
		n := int(k[0])
		if string(k[1:1+n]) != d[i] {
			d[i] = string(k[1 : 1+n])
		}
		k = k[1+n:]
	}
	if len(k) != 0 {
		return 0, errRowKey
	}
	return t, nil
}

func appendCounts(dst []byte, c *Counts) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(c)))
	for _, v := range c {
		dst = binary.AppendVarint(dst, v)
	}
	return dst
}

var errCounts = errors.New("damaged counts")

func parseCounts(b []byte, c *Counts) error {
	*c = Counts{}
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return errCounts
	}
	b = b[k:]
	for i := range n {
		v, k := binary.Varint(b)
		if k <= 0 {
			return errCounts
		}
		b = b[k:]
		if i < uint64(len(c)) {
			c[i] = v
		}
	}
	if len(b) != 0 {
		return errCounts
	}
	return nil
}

// ErrInUse is Open's error when another process (a running server) holds
// the database.
var ErrInUse = errors.New("held by another process (a running server rolls its reports up there)")

// openDB opens (creating) the database at path and checks its schema.
func openDB(path string, readOnly bool) (*bolt.DB, error) {
	if !readOnly {
		// The data directory, as the server makes it: a report asked
		// before the first start answers with no rows.
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, err
		}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 100 * time.Millisecond, ReadOnly: readOnly})
	if err != nil {
		if errors.Is(err, bolterr.ErrTimeout) {
			return nil, fmt.Errorf("%s: %w", path, ErrInUse)
		}
		return nil, err
	}
	if readOnly {
		err = db.View(func(tx *bolt.Tx) error { return checkSchema(tx) })
	} else {
		err = db.Update(func(tx *bolt.Tx) error {
			for _, b := range [][]byte{bucketMeta, bucketFiles, bucketMinutes, bucketQuarters, bucketForgotten} {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			meta := tx.Bucket(bucketMeta)
			if meta.Get(keySchema) == nil {
				if err := meta.Put(keySchema, schemaVersion); err != nil {
					return err
				}
			}
			return checkSchema(tx)
		})
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return db, nil
}

func checkSchema(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return errors.New("not a reports database (no meta bucket)")
	}
	if v := meta.Get(keySchema); string(v) != string(schemaVersion) {
		return fmt.Errorf("reports database schema %q, this build reads %q: it was written by another version of tsubame; "+
			"run that version, or move the file away and run tsubame report rebuild, which counts again only the "+
			"access-log files still kept", v, schemaVersion)
	}
	return nil
}

func compactedOf(tx *bolt.Tx) int64 {
	if v := tx.Bucket(bucketMeta).Get(keyCompacted); len(v) == 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

func loadFiles(tx *bolt.Tx) (map[string]*fileState, error) {
	out := map[string]*fileState{}
	err := tx.Bucket(bucketFiles).ForEach(func(k, v []byte) error {
		f := new(fileState)
		if err := json.Unmarshal(v, f); err != nil {
			return fmt.Errorf("file %s: %w", k, err)
		}
		out[string(k)] = f
		return nil
	})
	return out, err
}

func putFile(tx *bolt.Tx, key string, f *fileState) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketFiles).Put([]byte(key), b)
}

// merge adds rows (row key → counts) into the database: a row before the
// compaction point goes into its quarter.
func merge(tx *bolt.Tx, rows map[string]*Counts) error {
	compacted := compactedOf(tx)
	minutes, quarters := tx.Bucket(bucketMinutes), tx.Bucket(bucketQuarters)
	var key []byte
	var cur Counts
	// In key order: bbolt inserts into a node's sorted slice, and keys that
	// come in order are appended (in map order, each insert moved the
	// node's tail: 27 % of a busy server's CPU in memmove).
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		c := rows[k]
		b := minutes
		key = append(key[:0], k...)
		if t := int64(binary.BigEndian.Uint64(key)); t < compacted {
			b = quarters
			binary.BigEndian.PutUint64(key, uint64(floorDiv(t, int64(quarter/time.Second))))
		}
		if err := addRow(b, key, c, &cur); err != nil {
			return err
		}
	}
	return nil
}

func addRow(b *bolt.Bucket, key []byte, c *Counts, cur *Counts) error {
	*cur = Counts{}
	if old := b.Get(key); old != nil {
		if err := parseCounts(old, cur); err != nil {
			return fmt.Errorf("row %x: %w", key, err)
		}
	}
	cur.Add(c)
	// bbolt keeps the key and value slices until the transaction ends:
	// each Put gets its own.
	return b.Put(slices.Clone(key), appendCounts(nil, cur))
}

// floorDiv rounds t down to a multiple of n (for times before 1970 too).
func floorDiv(t, n int64) int64 {
	r := t % n
	if r < 0 {
		r += n
	}
	return t - r
}

// compact folds the minute rows before until (a quarter's start) into
// quarters, and moves the compaction point there.
func compact(tx *bolt.Tx, until int64) error {
	if until <= compactedOf(tx) {
		return nil
	}
	minutes, quarters := tx.Bucket(bucketMinutes), tx.Bucket(bucketQuarters)
	var key []byte
	var c, cur Counts
	cu := minutes.Cursor()
	for k, v := cu.First(); k != nil && int64(binary.BigEndian.Uint64(k)) < until; k, v = cu.First() {
		if err := parseCounts(v, &c); err != nil {
			return fmt.Errorf("row %x: %w", k, err)
		}
		key = append(key[:0], k...)
		binary.BigEndian.PutUint64(key, uint64(floorDiv(int64(binary.BigEndian.Uint64(k)), int64(quarter/time.Second))))
		if err := addRow(quarters, key, &c, &cur); err != nil {
			return err
		}
		if err := cu.Delete(); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put(keyCompacted, binary.BigEndian.AppendUint64(nil, uint64(until)))
}
