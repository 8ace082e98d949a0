package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"tsubame"
)

var _ tsubame.FrequencyCounter = (*Store)(nil)

// bucketFrequency holds the times of Take: key -> when its last time
// leaves the longest window, then the times, ascending, each in Unix
// microseconds, 8 bytes big-endian. It is made by the first Take.
var bucketFrequency = []byte("frequency")

// keyFrequencySweep, in the meta bucket, is the key the next sweep of
// bucketFrequency starts at.
var keyFrequencySweep = []byte("frequency_sweep")

// One Take in freqSweepOneIn (at random) that writes also visits the next
// freqSweepKeys keys of the bucket, in key order from where the last visit
// stopped, and deletes those whose times have all left their windows. That
// is four keys visited per write, and a write adds at most one key: a full
// pass over n keys takes about n/4 writes, so the bucket holds about 4/3 of
// the keys within their windows. Deleted keys' pages go back to bbolt's
// freelist, so the file stops growing at about that size.
const (
	freqSweepOneIn = 16
	freqSweepKeys  = 64
)

// Take records an impression for key at now if its caps allow one more
// (tsubame.FrequencyCounter). A call the caps refuse is answered by a read,
// with no write transaction: times only leave a window by now passing, so
// what a committed transaction shows over the cap stays over it at now.
// One that may pass is decided in a write transaction shared with the
// concurrent calls (groupCommit: one fsync for them all, with no wait for
// others to join), in which the calls run one after another: concurrent
// calls for one key never pass a cap together. ctx is checked before, not
// during, the commit. A read-only store refuses with EINVALID.
func (s *Store) Take(ctx context.Context, key string, caps []tsubame.FrequencyCap, now time.Time) (bool, error) {
	if err := tsubame.ValidateTake(key, caps); err != nil {
		return false, err
	}
	if s.db.IsReadOnly() {
		return false, wrap(bolterr.ErrDatabaseReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return false, unavailable(err)
	}
	at := now.UnixMicro()
	k := []byte(key) // bbolt keeps it until the commit: never reused
	refused := false
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketFrequency); b != nil {
			_, ok := tsubame.TakeFrequency(decodeTimes(b.Get(k)), caps, at)
			refused = !ok
		}
		return nil
	})
	if err != nil || refused {
		return false, wrap(err)
	}
	sweep := rand.N(freqSweepOneIn) == 0
	var taken bool
	err = s.freq.do(s.db, func(tx *bolt.Tx) error {
		// Afresh: the read above was another transaction's, and a call
		// before this one in the commit may have taken the same key.
		b, err := tx.CreateBucketIfNotExists(bucketFrequency)
		if err != nil {
			return err
		}
		var times []int64
		if times, taken = tsubame.TakeFrequency(decodeTimes(b.Get(k)), caps, at); taken {
			err = b.Put(k, encodeTimes(times, times[len(times)-1]+tsubame.LongestFrequencyWindow(caps)))
		}
		if err != nil || !sweep {
			return err
		}
		return sweepFrequency(tx, b, at)
	})
	if err != nil {
		return false, wrap(err)
	}
	return taken, nil
}

// decodeTimes copies the times out of a value of bucketFrequency (nil:
// none).
func decodeTimes(v []byte) []int64 {
	if len(v) < 8 {
		return nil
	}
	times := make([]int64, (len(v)-8)/8, (len(v)-8)/8+1)
	for i := range times {
		times[i] = int64(binary.BigEndian.Uint64(v[8+8*i:]))
	}
	return times
}

func encodeTimes(times []int64, expires int64) []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+8*len(times)), uint64(expires))
	for _, t := range times {
		v = binary.BigEndian.AppendUint64(v, uint64(t))
	}
	return v
}

// sweepFrequency visits the next freqSweepKeys keys of b and deletes those
// expired at now.
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
