// Package embedded is the zero-setup tsubame.Store: one bbolt file in the data
// directory. bbolt takes an exclusive file lock, so one process at a time may
// open the file; a second one fails at once with an ECONFLICT error that says
// so, instead of waiting on the lock.
//
// Like every store it imports only the domain and logbatch: never the cache, the listeners, render or config (arch_test.go).
package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"tsubame"
	"tsubame/internal/logbatch"
)

// FileName is the store file's name inside the data directory.
const FileName = "tsubame.db"

var (
	bucketPlacements = []byte("placements")
	bucketMeta       = []byte("meta")
	bucketAccessLog  = []byte("accesslog")
	bucketResults    = []byte("webhook_results")
	keySchema        = []byte("schema")
	schemaVersion    = []byte("1")
)

// ErrInUse is the cause of Open's error when another process holds the
// file (bbolt's lock): callers say what to do about it.
var ErrInUse = errors.New("held by another process")

// Options tune how the store file is opened.
type Options struct {
	// LockTimeout is how long Open waits for another process to release the
	// file before it gives up with ECONFLICT. Zero means 100ms.
	LockTimeout time.Duration
	// ReadOnly opens the file with a shared lock and refuses writes.
	ReadOnly bool
}

// Store is a bbolt-backed tsubame.Store, CampaignStore and Deduper. It is
// safe for concurrent use.
type Store struct {
	db   *bolt.DB
	now  func() time.Time
	seen seenCommits // of the event ids (dedupe.go)
	freq groupCommit // of the visitors' frequency records (frequency.go)
	// dropFrom is the key the next sweep of bucketQuotaDrop starts at
	// (nil: the first); touched only in a job of freq, in its write
	// transaction (quota.go).
	dropFrom []byte
	out      outcomeCommits // of Record and Ack (outcome.go)
}

var (
	_ tsubame.Store = (*Store)(nil)
)

// Open opens (creating if needed, unless read-only) the store file at path.
func Open(path string, opt Options) (*Store, error) {
	if opt.LockTimeout <= 0 {
		opt.LockTimeout = 100 * time.Millisecond
	}
	if !opt.ReadOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "cannot create data directory %q", filepath.Dir(path))
		}
	} else if _, err := os.Stat(path); err != nil {
		return nil, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "cannot open store %q", path)
	}
	// The hashmap freelist keeps commits fast as the file grows (millions of
	// webhook results); the array default sorts every free page per commit.
	db, err := bolt.Open(path, 0o640, &bolt.Options{Timeout: opt.LockTimeout, ReadOnly: opt.ReadOnly, FreelistType: bolt.FreelistMapType})
	if errors.Is(err, bolterr.ErrTimeout) {
		return nil, tsubame.WrapError(tsubame.ECONFLICT, ErrInUse, "store %q is in use by another process (a running tsubame server?)", path)
	}
	if err != nil {
		return nil, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "cannot open store %q", path)
	}
	if !opt.ReadOnly {
		err = db.Update(func(tx *bolt.Tx) error {
			for _, b := range [][]byte{bucketPlacements, bucketAccessLog, bucketResults, bucketSeen} {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			if err := createCampaignBuckets(tx); err != nil {
				return err
			}
			meta, err := tx.CreateBucketIfNotExists(bucketMeta)
			if err != nil {
				return err
			}
			if err := dropFrequencyV1(tx, meta); err != nil {
				return err
			}
			return checkSchema(meta, true)
		})
	} else {
		err = db.View(func(tx *bolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			if meta == nil || tx.Bucket(bucketPlacements) == nil {
				return errors.New("not a tsubame store")
			}
			return checkSchema(meta, false)
		})
	}
	if err != nil {
		_ = db.Close()
		return nil, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "cannot open store %q", path)
	}
	return &Store{db: db, now: time.Now}, nil
}

func checkSchema(meta *bolt.Bucket, write bool) error {
	v := meta.Get(keySchema)
	switch {
	case v == nil && write:
		return meta.Put(keySchema, schemaVersion)
	case !bytes.Equal(v, schemaVersion):
		return fmt.Errorf("unsupported schema version %q (this build reads %q)", v, schemaVersion)
	}
	return nil
}

// Get reads and decodes the placement with the given id.
func (s *Store) Get(ctx context.Context, id string) (*tsubame.Placement, error) {
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	var p tsubame.Placement
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketPlacements).Get([]byte(id))
		if v == nil {
			return tsubame.Errorf(tsubame.ENOTFOUND, "placement %q not found", id)
		}
		// Unmarshal copies what it keeps, so nothing points into the mmap after the tx.
		return decode(v, &p)
	})
	if err != nil {
		return nil, wrap(err)
	}
	return &p, nil
}

// Put writes p in its own transaction.
func (s *Store) Put(ctx context.Context, p *tsubame.Placement) error {
	return s.PutMany(ctx, []*tsubame.Placement{p})
}

// PutMany writes every placement in ps in one transaction: all or nothing.
func (s *Store) PutMany(ctx context.Context, ps []*tsubame.Placement) error {
	if err := tsubame.ValidatePlacements(ps); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	now := s.now().UTC()
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPlacements)
		// Keys in order fill pages sequentially, which keeps large imports fast.
		b.FillPercent = 0.9
		for _, p := range ps {
			p.UpdatedAt = now
			v, err := json.Marshal(p)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(p.ID), v); err != nil {
				return err
			}
		}
		return nil
	})
	return wrap(err)
}

// Delete removes the placement with the given id.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	return wrap(s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPlacements)
		if b.Get([]byte(id)) == nil {
			return tsubame.Errorf(tsubame.ENOTFOUND, "placement %q not found", id)
		}
		return b.Delete([]byte(id))
	}))
}

// List returns up to limit placements with ids after the given one, in id order.
func (s *Store) List(ctx context.Context, after string, limit int) ([]*tsubame.Placement, error) {
	if limit <= 0 {
		return nil, tsubame.Errorf(tsubame.EINVALID, "list limit must be positive")
	}
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	var out []*tsubame.Placement
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketPlacements).Cursor()
		k, v := c.Seek([]byte(after))
		if k != nil && after != "" && string(k) == after {
			k, v = c.Next()
		}
		for ; k != nil && len(out) < limit; k, v = c.Next() {
			var p tsubame.Placement
			if err := decode(v, &p); err != nil {
				return err
			}
			out = append(out, &p)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	return out, nil
}

// IDs returns every id, in byte order, from the keys alone.
func (s *Store) IDs(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	var ids []string
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketPlacements).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			ids = append(ids, string(k))
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	return ids, nil
}

// AppendLog stores the batch as one value under the next sequence number:
// one B+tree insert and one fsync per batch, however many lines it holds.
func (s *Store) AppendLog(ctx context.Context, batch []byte) error {
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	return wrap(s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccessLog)
		b.FillPercent = 1 // keys only ever grow: pack pages full
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		var key [8]byte
		binary.BigEndian.PutUint64(key[:], seq)
		return b.Put(key[:], batch)
	}))
}

// ScanLog calls fn for each stored line in order.
func (s *Store) ScanLog(ctx context.Context, fn func(line []byte) error) error {
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	return s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccessLog)
		if b == nil {
			return nil
		}
		var d logbatch.Decoder
		return b.ForEach(func(_, v []byte) error { return d.Each(v, fn) })
	})
}

// PutResult stores result under id. Concurrent calls are coalesced into
// shared transactions (bbolt's Batch), so many writers cost few fsyncs.
func (s *Store) PutResult(ctx context.Context, id string, result []byte) error {
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	return wrap(s.db.Batch(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketResults).Put([]byte(id), result)
	}))
}

// PutResults writes the batch in one transaction.
func (s *Store) PutResults(ctx context.Context, results []tsubame.Result) error {
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	return wrap(s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketResults)
		// Message ids mostly grow (sequence numbers, LINE's time-ordered
		// event ids): full pages split less and leave less to write.
		b.FillPercent = 0.9
		for _, r := range results {
			if err := b.Put([]byte(r.ID), r.Value); err != nil {
				return err
			}
		}
		return nil
	}))
}

// GetResult returns a copy of the result stored under id.
func (s *Store) GetResult(ctx context.Context, id string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketResults)
		var v []byte
		if b != nil {
			v = b.Get([]byte(id))
		}
		if v == nil {
			return tsubame.Errorf(tsubame.ENOTFOUND, "no result for %q", id)
		}
		out = bytes.Clone(v)
		return nil
	})
	return out, wrap(err)
}

// CountResults returns the number of stored results.
func (s *Store) CountResults(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, unavailable(err)
	}
	n := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketResults); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	return n, wrap(err)
}

// Close closes the file and releases its lock.
func (s *Store) Close() error { return s.db.Close() }

func decode(v []byte, p *tsubame.Placement) error {
	if err := json.Unmarshal(v, p); err != nil {
		return fmt.Errorf("corrupt placement record: %w", err)
	}
	return nil
}

// wrap turns bbolt failures into domain errors; domain errors pass through.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var e *tsubame.Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, bolterr.ErrDatabaseReadOnly) {
		return tsubame.WrapError(tsubame.EINVALID, err, "store is open read-only")
	}
	return unavailable(err)
}

func unavailable(err error) error {
	return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "embedded store failed")
}
