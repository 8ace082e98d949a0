package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"tsubame"
)

var _ tsubame.Handovers = (*Store)(nil)

// bucketHandovers holds the handovers not yet claimed: holder -> when it
// expires (Unix nanoseconds, 8 bytes big-endian) and the data.
var bucketHandovers = []byte("handovers")

// PutHandover keeps data as holder's handover for ttl (tsubame.Handovers),
// in the shared write transaction of the outcomes.
func (s *Store) PutHandover(ctx context.Context, holder string, data []byte, ttl time.Duration) error {
	if err := tsubame.ValidateHandover(holder, data, ttl); err != nil {
		return err
	}
	if s.db.IsReadOnly() {
		return wrap(bolterr.ErrDatabaseReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	return wrap(s.out.do(s.db, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketHandovers)
		if err != nil {
			return err
		}
		v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(data)), uint64(s.now().Add(ttl).UnixNano()))
		return b.Put([]byte(holder), append(v, data...))
	}))
}

// ClaimHandover takes a handover not yet claimed (tsubame.Handovers): the
// write transaction that deletes it is the claim.
func (s *Store) ClaimHandover(ctx context.Context) (string, []byte, error) {
	if s.db.IsReadOnly() {
		return "", nil, wrap(bolterr.ErrDatabaseReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return "", nil, unavailable(err)
	}
	var holder string
	var data []byte
	err := s.out.do(s.db, func(tx *bolt.Tx) error {
		holder, data = "", nil
		b := tx.Bucket(bucketHandovers)
		if b == nil {
			return nil
		}
		now := s.now().UnixNano()
		var drop [][]byte
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			drop = append(drop, bytes.Clone(k))
			if len(v) > 8 && int64(binary.BigEndian.Uint64(v)) > now {
				holder, data = string(k), bytes.Clone(v[8:])
				break
			}
		}
		for _, k := range drop {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", nil, wrap(err)
	}
	return holder, data, nil
}
