package report

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// backend keeps the rollups: this node's read positions (a fileState per
// file key), tombstones of files read whole and gone, and the rows. A
// commit changes a position and adds rows in one atomic step. Roller calls
// it under its lock, one call at a time.
type backend interface {
	// load returns this node's positions and the compaction point.
	load() (map[string]*fileState, int64, error)
	// commit adds rows (rowKey of a minute → counts) and moves file key
	// from prev (nil: none yet) to next.
	commit(key string, prev, next *fileState, rows map[string]*Counts) error
	// maintain writes the changed positions, turns forget into tombstones,
	// folds the minutes before until into quarters, and returns the
	// compaction point.
	maintain(changed, forget map[string]*fileState, until int64) (int64, error)
	// tombstones returns the keys of this node's tombstones.
	tombstones() (map[string]bool, error)
	// compacted returns the compaction point.
	compacted() (int64, error)
	// scan calls fn for each row in [from, to): quarters before the
	// compaction point, minutes from it on.
	scan(from, to int64, fn func(t int64, d *Dims, c *Counts) error) error
	// snapshot returns this node's positions and number of tombstones and
	// calls fn for each of its rows, as of one moment.
	snapshot(fn func(t int64, d *Dims, c *Counts) error) (map[string]*fileState, int, error)
	// reset forgets this node's positions, tombstones and rows.
	reset() error
	close() error
	// maxCells bounds the counters one commit adds (0: any): a Redis
	// commit is one script, which holds the server while it runs.
	maxCells() int
}

// boltBackend keeps the rollups in a bbolt file of their own (one node).
type boltBackend struct{ db *bolt.DB }

func (b boltBackend) load() (files map[string]*fileState, compacted int64, err error) {
	err = b.db.View(func(tx *bolt.Tx) error {
		compacted = compactedOf(tx)
		files, err = loadFiles(tx)
		return err
	})
	return files, compacted, err
}

func (b boltBackend) commit(key string, prev, next *fileState, rows map[string]*Counts) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		// The position must be the one the counts were read from: a
		// second reader of the file (a bug) is refused, not added twice.
		stored := tx.Bucket(bucketFiles).Get([]byte(key))
		switch {
		case prev == nil && stored != nil:
			return errStale
		case prev != nil:
			var cur fileState
			if stored == nil || json.Unmarshal(stored, &cur) != nil || cur.Offset != prev.Offset || cur.Lines != prev.Lines || cur.Done {
				return errStale
			}
		}
		if err := merge(tx, rows); err != nil {
			return err
		}
		return putFile(tx, key, next)
	})
}

func (b boltBackend) maintain(changed, forget map[string]*fileState, until int64) (compacted int64, err error) {
	err = b.db.Update(func(tx *bolt.Tx) error {
		for key, f := range changed {
			if err := putFile(tx, key, f); err != nil {
				return err
			}
		}
		for key, f := range forget {
			if err := tx.Bucket(bucketFiles).Delete([]byte(key)); err != nil {
				return err
			}
			if err := tx.Bucket(bucketForgotten).Put([]byte(key), []byte(f.First.UTC().Format(time.RFC3339Nano))); err != nil {
				return err
			}
		}
		if err := compact(tx, until); err != nil {
			return err
		}
		compacted = compactedOf(tx)
		return nil
	})
	return compacted, err
}

func (b boltBackend) tombstones() (map[string]bool, error) {
	out := map[string]bool{}
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketForgotten).ForEach(func(k, _ []byte) error {
			out[string(k)] = true
			return nil
		})
	})
	return out, err
}

func (b boltBackend) compacted() (c int64, err error) {
	err = b.db.View(func(tx *bolt.Tx) error { c = compactedOf(tx); return nil })
	return c, err
}

func (b boltBackend) scan(from, to int64, fn func(t int64, d *Dims, c *Counts) error) error {
	return b.db.View(func(tx *bolt.Tx) error { return scanRows(tx, from, to, fn) })
}

// scanRows calls fn for the rows of both buckets in [from, to).
func scanRows(tx *bolt.Tx, from, to int64, fn func(t int64, d *Dims, c *Counts) error) error {
	var (
		dims Dims
		c    Counts
		seek [8]byte
	)
	binary.BigEndian.PutUint64(seek[:], uint64(max(from, 0)))
	for _, bucket := range [][]byte{bucketQuarters, bucketMinutes} {
		cu := tx.Bucket(bucket).Cursor()
		for k, v := cu.Seek(seek[:]); k != nil; k, v = cu.Next() {
			t, err := parseRowKey(k, &dims)
			if err != nil {
				return err
			}
			if t >= to {
				break
			}
			if t < from {
				continue
			}
			if err := parseCounts(v, &c); err != nil {
				return fmt.Errorf("row %x: %w", k, err)
			}
			if err := fn(t, &dims, &c); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b boltBackend) snapshot(fn func(t int64, d *Dims, c *Counts) error) (files map[string]*fileState, forgotten int, err error) {
	err = b.db.View(func(tx *bolt.Tx) error {
		if files, err = loadFiles(tx); err != nil {
			return err
		}
		forgotten = tx.Bucket(bucketForgotten).Stats().KeyN
		return scanRows(tx, -1<<63, 1<<63-1, fn)
	})
	return files, forgotten, err
}

func (b boltBackend) reset() error {
	return b.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketFiles, bucketMinutes, bucketQuarters, bucketForgotten} {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Delete(keyCompacted)
	})
}

func (b boltBackend) close() error { return b.db.Close() }

func (boltBackend) maxCells() int { return 0 } // one transaction of the file's own
