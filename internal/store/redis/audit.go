package redis

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"tsubame"
)

var _ tsubame.Auditor = (*Store)(nil)

// auditFamily is a kind of keys: match reports whether a key is one, by
// what follows the prefix (rest) and whether the prefix was in a hash tag.
type auditFamily struct {
	name, what string
	match      func(rest string, tagged bool) bool
}

// auditFamilies are the kinds of keys the store writes, by what follows the
// key prefix (campaigns: by the prefix in a hash tag), in the order
// reported.
var auditFamilies = []auditFamily{
	{"placements", "p:<id>, ids: the placements and their index", func(r string, _ bool) bool {
		return strings.HasPrefix(r, "p:") || r == "ids"
	}},
	{"campaigns", "{<prefix>campaigns}:*: the campaign set (a hash per kind of its generation, its version and log of writes)", func(r string, tagged bool) bool {
		return tagged && strings.HasPrefix(r, "campaigns}")
	}},
	{"quota (day)", "quota:<key>/<date>: a day's budget or limit, dropped ads.budget.keep_daily after it", func(r string, _ bool) bool {
		_, day := tsubame.QuotaKeyDay(r)
		return strings.HasPrefix(r, "quota:") && day
	}},
	{"quota (total)", "quota:<key>: a flight's budget or limit, kept", func(r string, _ bool) bool { return strings.HasPrefix(r, "quota:") }},
	{"frequency", "fv:<visitor>: frequency caps, expiring with their longest window", func(r string, _ bool) bool { return strings.HasPrefix(r, "fv:") }},
	{"seen ids", "seen:<id>: impressions and clicks counted, expiring after ads.tracking.ttl", func(r string, _ bool) bool {
		return strings.HasPrefix(r, "seen:")
	}},
	{"outcomes", "out:{<server>}:*: each server's outcome queue and held bids, expiring", func(r string, _ bool) bool {
		return strings.HasPrefix(r, "out:")
	}},
	{"handovers", "{handovers}:*: holds handed over at a stop", func(r string, _ bool) bool { return strings.HasPrefix(r, "{handovers}") }},
	{"reports", "{report}:*: the report rollups and read positions", func(r string, _ bool) bool { return strings.HasPrefix(r, "{report}") }},
	{"assets", "asset:<sha256>: creatives' uploaded files, kept", func(r string, _ bool) bool { return strings.HasPrefix(r, "asset:") }},
	{"access log", "accesslog: batches of access_log: store", func(r string, _ bool) bool { return r == "accesslog" }},
	{"webhook results", "results: webhook results", func(r string, _ bool) bool { return r == "results" }},
	{"other", "keys under the prefix no part of this server writes", func(string, bool) bool { return true }},
}

// auditSample is how many keys of a family MEMORY USAGE is asked of; the
// family's bytes are their mean times its keys.
const auditSample = 200

// auditBatch is the keys a SCAN asks for, and the commands of a pipeline.
const auditBatch = 1000

// Audit counts the keys under the store's prefix by family (tsubame.Auditor):
// SCAN on every master (no command over a few milliseconds), PTTL of every
// key, MEMORY USAGE of a sample of each family.
func (s *Store) Audit(ctx context.Context, opt tsubame.AuditOptions) (*tsubame.StoreAudit, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	now := opt.Now
	if now.IsZero() {
		now = time.Now()
	}
	fams := make([]tsubame.AuditFamily, len(auditFamilies))
	sampled := make([]int64, len(auditFamilies)) // keys sized
	sized := make([]int64, len(auditFamilies))   // their bytes
	for i, f := range auditFamilies {
		fams[i] = tsubame.AuditFamily{Name: f.name, What: f.what}
	}
	out := &tsubame.StoreAudit{Store: "redis"}
	prefix := s.opt.KeyPrefix
	masters, err := s.masters(ctx)
	if err != nil {
		return nil, err
	}
	for _, node := range masters {
		for _, pattern := range []string{prefix + "*", "{" + prefix + "*"} {
			var cursor uint64
			for {
				cctx, cancel := s.ctx(ctx)
				e, err := node.Do(cctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(auditBatch).Build()).AsScanEntry()
				cancel()
				if err != nil {
					return nil, unavailable(err)
				}
				if err := s.auditKeys(ctx, node, e.Elements, prefix, fams, sampled, sized, opt, now, out); err != nil {
					return nil, err
				}
				if cursor = e.Cursor; cursor == 0 {
					break
				}
			}
		}
	}
	for i := range fams {
		if sampled[i] > 0 {
			fams[i].Bytes = sized[i] * fams[i].Keys / sampled[i]
		}
	}
	out.Families = fams
	return out, nil
}

// auditKeys adds keys to the families: their expiries, a sample's sizes,
// and the stale days (given a drop time with opt.ExpirePastDays).
func (s *Store) auditKeys(ctx context.Context, node rueidis.Client, keys []string, prefix string, fams []tsubame.AuditFamily,
	sampled, sized []int64, opt tsubame.AuditOptions, now time.Time, out *tsubame.StoreAudit) error {
	if len(keys) == 0 {
		return nil
	}
	fam := make([]int, len(keys))
	cmds := make(rueidis.Commands, 0, 2*len(keys))
	for i, k := range keys {
		rest, tagged := strings.CutPrefix(k, prefix)
		if !tagged {
			rest = strings.TrimPrefix(k, "{"+prefix)
		}
		fam[i] = slices.IndexFunc(auditFamilies, func(f auditFamily) bool { return f.match(rest, !tagged) })
		fams[fam[i]].Keys++
		cmds = append(cmds, node.B().Pttl().Key(k).Build())
	}
	var size []int // keys whose size is asked
	for i, k := range keys {
		if sampled[fam[i]] < auditSample {
			sampled[fam[i]]++
			size = append(size, i)
			cmds = append(cmds, node.B().MemoryUsage().Key(k).Build())
		}
	}
	cctx, cancel := s.ctx(ctx)
	res := node.DoMulti(cctx, cmds...)
	cancel()
	var expire rueidis.Commands
	for i, k := range keys {
		ttl, err := res[i].AsInt64()
		if err != nil {
			return unavailable(err)
		}
		if ttl != -1 {
			continue // expires, or went while scanned
		}
		fams[fam[i]].NoExpiry++
		if auditFamilies[fam[i]].name != "quota (day)" {
			continue
		}
		date, _ := tsubame.QuotaKeyDay(k)
		if drop, stale := tsubame.StaleDay(date, opt.KeepDaily, now); stale {
			out.StaleDays++
			if opt.ExpirePastDays {
				expire = append(expire, node.B().Pexpireat().Key(k).MillisecondsTimestamp(drop.UnixMilli()).Build())
			}
		}
	}
	for j, i := range size {
		n, err := res[len(keys)+j].AsInt64()
		if err != nil && !rueidis.IsRedisNil(err) {
			return unavailable(err)
		}
		sized[fam[i]] += n
	}
	if len(expire) > 0 {
		cctx, cancel := s.ctx(ctx)
		defer cancel()
		for _, r := range node.DoMulti(cctx, expire...) {
			if err := r.Error(); err != nil {
				return unavailable(err)
			}
			out.Expired++
		}
	}
	return nil
}

// masters returns a client of each master: the server itself, or each node
// of a cluster whose ROLE is master.
func (s *Store) masters(ctx context.Context) ([]rueidis.Client, error) {
	nodes := s.c.Nodes()
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	var out []rueidis.Client
	for _, a := range addrs {
		cctx, cancel := s.ctx(ctx)
		role, err := nodes[a].Do(cctx, nodes[a].B().Role().Build()).ToArray()
		cancel()
		if err != nil {
			return nil, unavailable(err)
		}
		if len(role) > 0 {
			if r, _ := role[0].ToString(); r == "master" {
				out = append(out, nodes[a])
			}
		}
	}
	if len(out) == 0 {
		return nil, tsubame.Errorf(tsubame.EUNAVAILABLE, "redis store: no master among %d nodes", len(nodes))
	}
	return out, nil
}
