package embedded

import (
	"context"
	"encoding/binary"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"tsubame"
)

var _ tsubame.Auditor = (*Store)(nil)

// auditBuckets name the store's buckets as the audit reports them, with
// what they hold and whether their records expire; a bucket not named (the
// campaign objects' kinds) is reported by its own name, kept.
var auditBuckets = map[string]struct {
	name, what string
	expires    bool
}{
	string(bucketPlacements):    {"placements", "the placements", false},
	string(bucketCampaignMeta):  {"campaign meta", "the campaign set's version and currency", false},
	string(bucketSeen):          {"seen ids", "impressions and clicks counted, swept after ads.tracking.ttl", true},
	string(bucketFrequency):     {"frequency", "frequency caps per visitor, swept with their longest window", true},
	string(bucketHandovers):     {"handovers", "holds handed over at a stop", false},
	string(bucketAssets):        {"assets", "creatives' uploaded files", false},
	string(bucketOutcomeBids):   {"outcomes", "held bids' outcomes, swept", true},
	string(bucketOutcomeQueues): {"outcome queues", "each server's outcome queue", false},
	string(bucketAccessLog):     {"access log", "batches of access_log: store", false},
	string(bucketResults):       {"webhook results", "webhook results", false},
	string(bucketMeta):          {"meta", "the schema and the sweeps' positions", false},
	string(bucketQuotaDrop):     {"quota drops", "when each day's key goes", false},
}

// Audit counts the records of every bucket (tsubame.Auditor), bytes as
// bbolt's pages in use; the quota bucket by days' and totals' keys, a day's
// key expiring when it has a drop time. With ExpirePastDays the stale days
// get theirs and are dropped at once.
func (s *Store) Audit(ctx context.Context, opt tsubame.AuditOptions) (*tsubame.StoreAudit, error) {
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	now := opt.Now
	if now.IsZero() {
		now = time.Now()
	}
	out := &tsubame.StoreAudit{Store: "embedded"}
	type drop struct {
		key []byte
		at  time.Time
	}
	var stale []drop
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			st := b.Stats()
			bytes := int64(st.LeafInuse + st.BranchInuse + st.InlineBucketInuse)
			if string(name) != string(bucketQuota) {
				f := tsubame.AuditFamily{Name: string(name), Keys: int64(st.KeyN), NoExpiry: int64(st.KeyN), Bytes: bytes, What: "kept"}
				if a, ok := auditBuckets[string(name)]; ok {
					f.Name, f.What = a.name, a.what
					if a.expires {
						f.NoExpiry = 0 // swept
					}
				}
				out.Families = append(out.Families, f)
				return nil
			}
			days := tsubame.AuditFamily{Name: "quota (day)", What: "a day's budget or limit, dropped ads.budget.keep_daily after it"}
			totals := tsubame.AuditFamily{Name: "quota (total)", What: "a flight's budget or limit, kept"}
			drops := tx.Bucket(bucketQuotaDrop)
			err := b.ForEach(func(k, v []byte) error {
				date, day := tsubame.QuotaKeyDay(string(k))
				if !day {
					totals.Keys++
					totals.NoExpiry++
					totals.Bytes += int64(len(k) + len(v))
					return nil
				}
				days.Keys++
				days.Bytes += int64(len(k) + len(v))
				if drops != nil && drops.Get(k) != nil {
					return nil
				}
				days.NoExpiry++
				if at, ok := tsubame.StaleDay(date, opt.KeepDaily, now); ok {
					out.StaleDays++
					stale = append(stale, drop{append([]byte(nil), k...), at})
				}
				return nil
			})
			out.Families = append(out.Families, days, totals)
			return err
		})
	})
	if err != nil {
		return nil, wrap(err)
	}
	if !opt.ExpirePastDays || len(stale) == 0 {
		return out, nil
	}
	if s.db.IsReadOnly() {
		return nil, wrap(bolterr.ErrDatabaseReadOnly)
	}
	err = s.freq.do(s.db, func(tx *bolt.Tx) error {
		d, err := tx.CreateBucketIfNotExists(bucketQuotaDrop)
		if err != nil {
			return err
		}
		for _, x := range stale {
			if err := d.Put(x.key, binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(x.at.UnixNano()))); err != nil {
				return err
			}
		}
		s.dropFrom = nil
		return s.dropQuotas(tx, s.now().UnixNano(), d.Stats().KeyN) // one whole pass
	})
	if err != nil {
		return nil, wrap(err)
	}
	out.Expired = int64(len(stale))
	return out, nil
}
