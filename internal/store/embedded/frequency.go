package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"strings"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"tsubame"
)

var _ tsubame.FrequencyCounter = (*Store)(nil)

// bucketFrequency holds the visitors' records: visitor -> when the last of
// its entries stops mattering (Unix microseconds, 8 bytes big-endian),
// then a line per line item, "<line item>=<entries>\n" (the entries as
// tsubame.AppendFrequencyEntries writes them; an id holds no '=' or
// newline). It is made by the first Update.
var bucketFrequency = []byte("frequency_visitors")

// keyFrequencySweep, in the meta bucket, is the key the next sweep of
// bucketFrequency starts at.
var keyFrequencySweep = []byte("frequency_visitors_sweep")

// The bucket and sweep key of the records kept per line item and visitor
// before a visitor's line items shared one record: dropped when the file
// is opened for writing (the counts of one window are forgotten once).
var (
	bucketFrequencyV1      = []byte("frequency")
	keyFrequencySweepV1    = []byte("frequency_sweep")
	errFrequencyRecordSize = tsubame.Errorf(tsubame.EINTERNAL, "a stored frequency record is shorter than its expiry")
)

// One Update in freqSweepOneIn (at random) that writes also visits the
// next freqSweepKeys visitors of the bucket, in key order from where the
// last visit stopped, and deletes those whose entries have all stopped
// mattering. That is four visitors visited per write, and a write adds at
// most one: a full pass over n visitors takes about n/4 writes, so the
// bucket holds about 4/3 of the visitors that still matter. Deleted
// visitors' pages go back to bbolt's freelist, so the file stops growing
// at about that size.
const (
	freqSweepOneIn = 16
	freqSweepKeys  = 64
)

// dropFrequencyV1 deletes the records of the earlier layout, if any.
func dropFrequencyV1(tx *bolt.Tx, meta *bolt.Bucket) error {
	if tx.Bucket(bucketFrequencyV1) != nil {
		if err := tx.DeleteBucket(bucketFrequencyV1); err != nil {
			return err
		}
	}
	return meta.Delete(keyFrequencySweepV1)
}

// Read copies visitor's record into rec (tsubame.FrequencyCounter), in a
// read transaction.
func (s *Store) Read(ctx context.Context, visitor string, rec *tsubame.FrequencyRecord) error {
	if err := tsubame.ValidateVisitor(visitor); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	rec.Reset()
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketFrequency); b != nil {
			_, err := decodeRecord(b.Get([]byte(visitor)), rec)
			return err
		}
		return nil
	})
	if err != nil {
		rec.Reset()
		return wrap(err)
	}
	rec.Read = true
	return nil
}

// Update applies u to its visitor's record (tsubame.FrequencyCounter). A
// take or a hold the caps refuse is answered by a read, with no write
// transaction: what a committed transaction shows over the cap is the
// answer of that moment. One that may pass is decided in a write
// transaction shared with the concurrent calls (groupCommit: one fsync for
// them all, with no wait for others to join), in which the calls run one
// after another: concurrent calls for one visitor never pass a cap
// together. ctx is checked before, not during, the commit. A read-only
// store refuses with EINVALID.
func (s *Store) Update(ctx context.Context, u *tsubame.FrequencyUpdate, rec *tsubame.FrequencyRecord) (bool, error) {
	if err := tsubame.ValidateFrequencyUpdate(u); err != nil {
		return false, err
	}
	if s.db.IsReadOnly() {
		return false, wrap(bolterr.ErrDatabaseReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return false, unavailable(err)
	}
	if rec == nil {
		rec = &tsubame.FrequencyRecord{}
	}
	k := []byte(u.Visitor) // bbolt keeps it until the commit: never reused
	if u.Op == tsubame.FrequencyTake || u.Op == tsubame.FrequencyHold {
		refused := false
		rec.Reset()
		err := s.db.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket(bucketFrequency); b != nil {
				if _, err := decodeRecord(b.Get(k), rec); err != nil {
					return err
				}
			}
			line := rec.Entries(u.LineItem)
			_, ok := tsubame.ApplyFrequency(append([]tsubame.FrequencyEntry(nil), line...), u)
			refused = !ok
			return nil
		})
		if err != nil || refused {
			if err != nil {
				rec.Reset()
			} else {
				rec.Read = true
			}
			return false, wrap(err)
		}
	}
	sweep := rand.N(freqSweepOneIn) == 0
	var ok bool
	err := s.freq.do(s.db, func(tx *bolt.Tx) error {
		// Afresh: the read above was another transaction's, and a call
		// before this one in the commit may have changed the visitor.
		b, err := tx.CreateBucketIfNotExists(bucketFrequency)
		if err != nil {
			return err
		}
		rec.Reset()
		expires, err := decodeRecord(b.Get(k), rec)
		if err != nil {
			return err
		}
		i := 0
		for i < len(rec.Lines) && rec.Lines[i].LineItem != u.LineItem {
			i++
		}
		if i == len(rec.Lines) {
			rec.AddLine(u.LineItem)
		}
		rec.Lines[i].Entries, ok = tsubame.ApplyFrequency(rec.Lines[i].Entries, u)
		if len(rec.Lines[i].Entries) == 0 {
			rec.Lines = append(rec.Lines[:i], rec.Lines[i+1:]...)
		}
		if ok && u.Adds() {
			expires = max(expires, u.Expires())
		}
		if len(rec.Lines) == 0 {
			err = b.Delete(k)
		} else {
			err = b.Put(k, encodeRecord(rec.Lines, expires))
		}
		if err != nil || !sweep {
			return err
		}
		return sweepFrequency(tx, b, u.Now.UnixMicro())
	})
	if err != nil {
		rec.Reset()
		return false, wrap(err)
	}
	rec.Read = true
	return ok, nil
}

// decodeRecord appends the lines of a value of bucketFrequency to rec
// (none when v is nil) and returns its expiry; the strings are copies.
func decodeRecord(v []byte, rec *tsubame.FrequencyRecord) (int64, error) {
	if v == nil {
		return 0, nil
	}
	if len(v) < 8 {
		return 0, errFrequencyRecordSize
	}
	expires := int64(binary.BigEndian.Uint64(v))
	for text := range strings.Lines(string(v[8:])) {
		line, entries, ok := strings.Cut(strings.TrimSuffix(text, "\n"), "=")
		if !ok {
			return 0, tsubame.Errorf(tsubame.EINTERNAL, "stored frequency line %q is corrupt", text)
		}
		l := rec.AddLine(line)
		var err error
		if l.Entries, err = tsubame.ParseFrequencyEntries(l.Entries, entries); err != nil {
			return 0, err
		}
	}
	return expires, nil
}

func encodeRecord(lines []tsubame.FrequencyLine, expires int64) []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 64), uint64(expires))
	for _, l := range lines {
		v = append(append(v, l.LineItem...), '=')
		v = append(tsubame.AppendFrequencyEntries(v, l.Entries), '\n')
	}
	return v
}

// sweepFrequency visits the next freqSweepKeys visitors of b and deletes
// those expired at now.
func sweepFrequency(tx *bolt.Tx, b *bolt.Bucket, now int64) error {
	meta := tx.Bucket(bucketMeta)
	c := b.Cursor()
	k, v := c.First()
	if from := meta.Get(keyFrequencySweep); from != nil {
		k, v = c.Seek(from)
	}
	var expired [][]byte
	for n := 0; k != nil && n < freqSweepKeys; k, v = c.Next() {
		n++
		if len(v) < 8 || int64(binary.BigEndian.Uint64(v)) <= now {
			// Deleting under a cursor can make it skip the next key:
			// delete after the walk. The copy outlives the page.
			expired = append(expired, bytes.Clone(k))
		}
	}
	var err error
	if k == nil { // the end: the next pass starts over
		err = meta.Delete(keyFrequencySweep)
	} else {
		err = meta.Put(keyFrequencySweep, bytes.Clone(k))
	}
	for _, k := range expired {
		if err != nil {
			break
		}
		err = b.Delete(k)
	}
	return err
}
