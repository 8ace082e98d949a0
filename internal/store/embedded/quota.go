package embedded

import (
	"context"
	"encoding/binary"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"tsubame"
)

var _ tsubame.Quotas = (*Store)(nil)

// bucketQuota holds the keys of Quotas: key -> its settled units (8 bytes
// big-endian), then per lease its expiry (Unix nanoseconds of the store's
// clock, 8 bytes), its units (8 bytes), the length of its holder (1 byte)
// and the holder; then per holder that released, its applied release ids:
// 8 zero bytes, their count (8 bytes), 0x80 | the length of the holder (1
// byte), the holder, and per id its length (1 byte) and the id, oldest
// first. It is made by the first Lease that grants. A key is deleted only
// once the time Expire gave it has passed: it holds settled spend.
var bucketQuota = []byte("quota")

// bucketQuotaDrop holds the keys Expire named: key -> when it is dropped
// (Unix nanoseconds of the store's clock, 8 bytes big-endian). Each write
// of a quota visits the next few (sweepPerWrite) and drops the expired.
var bucketQuotaDrop = []byte("quota_drop")

// Lease grants holder up to want units of key within limit
// (tsubame.Quotas), in a write transaction shared with the concurrent
// calls of Lease, Release and Take (the group commit of Take's times: the
// calls of a commit run one after another, so leases of one key never
// exceed its limit together, and more calls share an fsync). Expiries are
// by the wall clock, which survives a restart: a step of it moves them. A
// read-only store refuses with EINVALID.
func (s *Store) Lease(ctx context.Context, key, holder string, limit, want int64, ttl time.Duration) (granted, held int64, err error) {
	if err := tsubame.ValidateLease(key, holder, limit, want, ttl); err != nil {
		return 0, 0, err
	}
	err = s.quotaUpdate(ctx, key, func(q *tsubame.QuotaState, now int64) bool {
		granted = q.Lease(holder, limit, want, now, now+int64(ttl))
		held = q.Held(holder)
		return true
	})
	if err != nil {
		return 0, 0, err
	}
	return granted, held, nil
}

// Release ends part of holder's lease of key (tsubame.Quotas), in the
// shared write transaction as Lease does.
func (s *Store) Release(ctx context.Context, key, holder, id string, used, unused int64) error {
	if err := tsubame.ValidateRelease(key, holder, id, used, unused); err != nil {
		return err
	}
	var rerr error
	err := s.quotaUpdate(ctx, key, func(q *tsubame.QuotaState, now int64) bool {
		rerr = q.Release(holder, id, used, unused, now)
		return rerr == nil // an error of one job would fail its whole commit
	})
	if err != nil {
		return err
	}
	return rerr
}

// Debit settles units of key past its leases (tsubame.Quotas), in the
// shared write transaction as Lease does.
func (s *Store) Debit(ctx context.Context, key, holder, id string, units int64) error {
	if err := tsubame.ValidateDebit(key, holder, id, units); err != nil {
		return err
	}
	return s.quotaUpdate(ctx, key, func(q *tsubame.QuotaState, now int64) bool {
		q.Debit(holder, id, units, now)
		return true
	})
}

// Committed reports key's settled units and outstanding leases
// (tsubame.Quotas), with the expired leases counted as settled, by a read:
// the next write of the key records them so.
func (s *Store) Committed(ctx context.Context, key string) (settled, outstanding int64, err error) {
	if err := tsubame.ValidateQuotaKey(key); err != nil {
		return 0, 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, unavailable(err)
	}
	var q tsubame.QuotaState
	err = s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketQuota); b != nil {
			q, err = decodeQuota(b.Get([]byte(key)))
		}
		return err
	})
	if err != nil {
		return 0, 0, wrap(err)
	}
	q.Expire(s.now().UnixNano())
	return q.Settled, q.Outstanding(), nil
}

// quotaUpdate runs op on key's state in a shared write transaction, and
// writes the state back if op says so.
func (s *Store) quotaUpdate(ctx context.Context, key string, op func(q *tsubame.QuotaState, now int64) (write bool)) error {
	if s.db.IsReadOnly() {
		return wrap(bolterr.ErrDatabaseReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	k := []byte(key) // bbolt keeps it until the commit: never reused
	err := s.freq.do(s.db, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketQuota)
		if err != nil {
			return err
		}
		v := b.Get(k)
		q, err := decodeQuota(v)
		if err != nil {
			return nil // reported by the read below; the others' jobs commit
		}
		now := s.now().UnixNano()
		if op(&q, now) && (v != nil || len(q.Leases) > 0 || q.Settled > 0) {
			if err := b.Put(k, encodeQuota(q)); err != nil {
				return err
			}
		}
		return s.dropQuotas(tx, now, sweepPerWrite)
	})
	if err != nil {
		return wrap(err)
	}
	// A value that cannot be decoded is reported here, out of the commit.
	return s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketQuota); b != nil {
			_, err := decodeQuota(b.Get(k))
			return err
		}
		return nil
	})
}

// releasedFlag marks, in the byte of a holder's length, a record of
// applied release ids rather than a lease (a holder is at most 64 bytes).
const releasedFlag = 0x80

func encodeQuota(q tsubame.QuotaState) []byte {
	n := 8
	for _, l := range q.Leases {
		n += 17 + len(l.Holder)
	}
	for _, r := range q.Released {
		n += 17 + len(r.Holder)
		for _, id := range r.IDs {
			n += 1 + len(id)
		}
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, n), uint64(q.Settled))
	for _, l := range q.Leases {
		v = binary.BigEndian.AppendUint64(v, uint64(l.Expires))
		v = binary.BigEndian.AppendUint64(v, uint64(l.Units))
		v = append(v, byte(len(l.Holder)))
		v = append(v, l.Holder...)
	}
	for _, r := range q.Released {
		v = binary.BigEndian.AppendUint64(v, 0)
		v = binary.BigEndian.AppendUint64(v, uint64(len(r.IDs)))
		v = append(v, releasedFlag|byte(len(r.Holder)))
		v = append(v, r.Holder...)
		for _, id := range r.IDs {
			v = append(v, byte(len(id)))
			v = append(v, id...)
		}
	}
	return v
}

// decodeQuota copies a value of bucketQuota out (nil: a key never leased).
func decodeQuota(v []byte) (tsubame.QuotaState, error) {
	var q tsubame.QuotaState
	if v == nil {
		return q, nil
	}
	if len(v) < 8 {
		return q, tsubame.Errorf(tsubame.EINTERNAL, "embedded store: quota value of %d bytes", len(v))
	}
	truncated := tsubame.Errorf(tsubame.EINTERNAL, "embedded store: truncated quota value")
	q.Settled = int64(binary.BigEndian.Uint64(v))
	for v = v[8:]; len(v) > 0; {
		if len(v) < 17 || len(v) < 17+int(v[16]&^releasedFlag) {
			return q, truncated
		}
		n := int(v[16] &^ releasedFlag)
		if v[16]&releasedFlag == 0 {
			q.Leases = append(q.Leases, tsubame.QuotaLease{
				Expires: int64(binary.BigEndian.Uint64(v)),
				Units:   int64(binary.BigEndian.Uint64(v[8:])),
				Holder:  string(v[17 : 17+n]),
			})
			v = v[17+n:]
			continue
		}
		count := binary.BigEndian.Uint64(v[8:])
		if count > tsubame.QuotaReleaseIDs {
			return q, tsubame.Errorf(tsubame.EINTERNAL, "embedded store: %d release ids in a quota value", count)
		}
		r := tsubame.QuotaReleased{Holder: string(v[17 : 17+n]), IDs: make([]string, 0, count)}
		v = v[17+n:]
		for range count {
			if len(v) < 1 || len(v) < 1+int(v[0]) {
				return q, truncated
			}
			r.IDs = append(r.IDs, string(v[1:1+int(v[0])]))
			v = v[1+int(v[0]):]
		}
		q.Released = append(q.Released, r)
	}
	return q, nil
}

// Expire drops key once the store's clock is past at (tsubame.Quotas): it
// is recorded in bucketQuotaDrop, and dropped by the writes' sweeps.
func (s *Store) Expire(ctx context.Context, key string, at time.Time) error {
	if err := tsubame.ValidateQuotaKey(key); err != nil {
		return err
	}
	if s.db.IsReadOnly() {
		return wrap(bolterr.ErrDatabaseReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	k := []byte(key)
	err := s.freq.do(s.db, func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketQuota); b == nil || b.Get(k) == nil {
			return nil // not made
		}
		d, err := tx.CreateBucketIfNotExists(bucketQuotaDrop)
		if err != nil {
			return err
		}
		if err := d.Put(k, binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(at.UnixNano()))); err != nil {
			return err
		}
		return s.dropQuotas(tx, s.now().UnixNano(), sweepPerWrite)
	})
	return wrap(err)
}

// dropQuotas visits the next limit keys of bucketQuotaDrop and deletes
// those whose time has come at now, with their quotas.
func (s *Store) dropQuotas(tx *bolt.Tx, now int64, limit int) error {
	d := tx.Bucket(bucketQuotaDrop)
	if d == nil {
		return nil
	}
	due := sweepDue(d, &s.dropFrom, now, limit)
	q := tx.Bucket(bucketQuota)
	for _, k := range due {
		if err := d.Delete(k); err != nil {
			return err
		}
		if q != nil {
			if err := q.Delete(k); err != nil {
				return err
			}
		}
	}
	return nil
}
