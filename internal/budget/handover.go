package budget

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"

	"tsubame"
	"tsubame/internal/decision"
)

// A restart burns nothing: a stopping ledger gives back what it holds
// unused and what was spent, but keeps the lease units its open holds
// stand on, and hands the holds over (tsubame.Handovers). A running
// ledger claims the handover and settles those holds under the stopped
// one's name (a child ledger with its holder): it reads the stopped
// holder's outcome queue, renews its leases, spends what is billed and
// gives back what is not, as the stopped ledger would have. A handover
// nobody claims, like the holds of a node that died, leaves its leases to
// expire, when the store counts them as spent.

// handover is a stopped ledger's open holds, as its handover keeps them.
type handover struct {
	Buckets []handedBucket `json:"buckets"`
	// Kept are the counts of won bids spent at their end (keptTable), so
	// that their late bills are matched by the server that takes over.
	Kept []handedKept `json:"kept,omitempty"`
}

type handedKept struct {
	Line string `json:"line"`
	Due  int64  `json:"due"` // the start of their span (keptKey)
	N    int64  `json:"n"`
}

type handedBucket struct {
	Line   string       `json:"line"`
	Due    int64        `json:"due"`
	Open   int64        `json:"open"`
	Won    int64        `json:"won"`
	WinBy  int64        `json:"win_by"`
	BillBy int64        `json:"bill_by"`
	Share  int64        `json:"share,omitempty"`    // reservation.share
	Keep   bool         `json:"keep_won,omitempty"` // reservation.keepWon
	Slots  []handedSlot `json:"slots"`
}

type handedSlot struct {
	Key   string `json:"key"`
	Scale int64  `json:"scale"`
	Units int64  `json:"units"` // local units one bid costs
	// Pool is what the bucket's bids hold of the account together (nil,
	// from a server before pools: each bid holds its units).
	Pool *int64 `json:"pool,omitempty"`
}

// snapshot lists the open holds by bucket, and the local units they hold
// on each account.
func (t *holdTable) snapshot() ([]handedBucket, map[*account]int64) {
	held := map[*account]int64{}
	var out []handedBucket
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for k, bs := range sh.m {
			for _, b := range bs {
				hb := handedBucket{Line: k.line, Due: k.due, Open: b.open, Won: b.won, WinBy: b.winBy, BillBy: b.billBy, Share: b.r.share, Keep: b.r.keepWon}
				for j := range b.r.n {
					s := b.r.slots[j]
					pool := b.pool[j]
					hb.Slots = append(hb.Slots, handedSlot{Key: s.acct.key, Scale: s.acct.scale, Units: s.units, Pool: &pool})
					held[s.acct] += pool
				}
				out = append(out, hb)
			}
		}
		sh.mu.Unlock()
	}
	return out, held
}

// claimHandovers adopts the handovers of stopped ledgers, a few a round.
func (g *Ledger) claimHandovers(ctx context.Context) {
	if g.opt.Handovers == nil {
		return
	}
	for range 4 {
		sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
		holder, data, err := g.opt.Handovers.ClaimHandover(sctx)
		cancel()
		if err != nil {
			g.storeErrors.Add(1)
			if g.log != nil {
				g.log.Warn("cannot claim a stopped server's open bids (retried)", "err", err)
			}
			return
		}
		if holder == "" {
			return
		}
		if holder == g.opt.Holder {
			continue // its own, from a Close that is over (a test's reuse)
		}
		if err := g.adopt(ctx, holder, data); err != nil && g.log != nil {
			g.log.Warn("cannot settle a stopped server's open bids: their leases end by their expiry and count as spent",
				"holder", holder, "err", err)
		}
	}
}

// adopt makes a child ledger under holder for its handed-over holds.
func (g *Ledger) adopt(ctx context.Context, holder string, data []byte) error {
	var h handover
	if err := json.Unmarshal(data, &h); err != nil {
		return tsubame.WrapError(tsubame.EINTERNAL, err, "corrupt handover")
	}
	opt := g.opt
	opt.Holder, opt.Handovers = holder, nil
	c := &Ledger{quotas: g.quotas, outcomes: g.outcomes, opt: opt, ttl: g.ttl, log: g.log,
		accounts: map[string]*account{}, kicks: make(chan *account, 1024), child: true, parent: g, traffic: g.traffic}
	for _, k := range h.Kept {
		if k.N <= 0 || k.Line == "" {
			return tsubame.Errorf(tsubame.EINTERNAL, "corrupt handover: kept %+v", k)
		}
		c.kept.add(bucketKey{k.Line, k.Due}, k.N)
	}
	// Release ids are the holder's: the stopped ledger numbered its
	// accounts from 1, and the store keeps its last ids, so that one of
	// them again would be taken for a retry and not applied. The child
	// numbers its accounts from a random base.
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	c.made = binary.BigEndian.Uint64(nonce[:]) >> 2
	c.holds.init()
	now := g.opt.Now().UnixNano()
	held := map[*account]int64{}
	for _, hb := range h.Buckets {
		r := reservation{share: hb.Share, keepWon: hb.Keep}
		var pool [maxSlots]int64
		for _, s := range hb.Slots {
			if r.n == maxSlots || s.Scale != 1 && s.Scale != impScale && s.Scale != nanosPerMicro || s.Units <= 0 ||
				s.Pool != nil && *s.Pool < 0 || hb.Share < 0 || hb.Share > decision.HoldShares {
				return tsubame.Errorf(tsubame.EINTERNAL, "corrupt handover: slot %+v", s)
			}
			a := c.accounts[s.Key]
			if a == nil {
				c.made++
				a = &account{key: s.Key, scale: s.Scale, nonce: c.made}
				cfg := accountCfg{end: hb.BillBy}
				g.mu.Lock()
				if mine := g.accounts[s.Key]; mine != nil {
					cfg = *mine.cfg.Load()
				}
				g.mu.Unlock()
				a.cfg.Store(&cfg)
				c.accounts[s.Key] = a
			}
			r.slots[r.n] = slot{a, s.Units}
			pool[r.n] = (hb.Open + hb.Won) * r.held(r.n)
			if s.Pool != nil {
				pool[r.n] = *s.Pool
			}
			held[a] += pool[r.n]
			a.pool(pool[r.n], hb.Open+hb.Won, &r, r.n) // what its bills past their holds may be paid from
			r.n++
			a.holds.Add(hb.Open + hb.Won)
		}
		c.holds.put(bucketKey{hb.Line, hb.Due}, &bucket{r: r, open: hb.Open, won: hb.Won, pool: pool, winBy: hb.WinBy, billBy: hb.BillBy, made: now})
	}
	// What the store holds of the stopped holder's leases stands on the
	// holds: the rest goes back at the child's first round.
	for _, a := range c.accounts {
		sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
		_, leased, err := g.quotas.Lease(sctx, a.key, holder, 0, 0, g.ttl)
		cancel()
		if err != nil {
			return err
		}
		a.leased = leased
		a.hand.Store(max(leased*a.scale-held[a], 0))
		a.exp.Store(now + int64(g.ttl))
		a.spendBy.Store(now) // a child never spends its hand
	}
	g.mu.Lock()
	g.children = append(g.children, c)
	g.mu.Unlock()
	if g.log != nil {
		g.log.Info("settling a stopped server's open bids", "holder", holder, "buckets", len(h.Buckets))
	}
	return nil
}

// tickChildren runs a round of each adopted ledger, and drops those that
// hold nothing any more.
func (g *Ledger) tickChildren(ctx context.Context) {
	g.mu.Lock()
	children := append([]*Ledger(nil), g.children...)
	g.mu.Unlock()
	var done []*Ledger
	for _, c := range children {
		c.Tick(ctx)
		if c.empty() {
			done = append(done, c)
		}
	}
	if len(done) == 0 {
		return
	}
	g.mu.Lock()
	kept := g.children[:0]
	for _, c := range g.children {
		if !containsLedger(done, c) {
			kept = append(kept, c)
		}
	}
	g.children = kept
	g.mu.Unlock()
}

func containsLedger(ls []*Ledger, l *Ledger) bool {
	for _, x := range ls {
		if x == l {
			return true
		}
	}
	return false
}

// empty reports whether a child holds nothing and leases nothing.
func (g *Ledger) empty() bool {
	g.loopMu.Lock()
	defer g.loopMu.Unlock()
	if h, _, _ := g.holds.counts(); h > 0 || g.kept.len() > 0 {
		return false // bids held, or kept ones whose late bills may come
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range g.accounts {
		if a.leased > 0 || a.pending != nil || a.debit != nil || a.hand.Load() > 0 || a.used.Load() > 0 {
			return false
		}
	}
	return true
}

// handOver writes the ledger's open holds as its handover, after Close
// gave back everything else; it reports whether the holds were handed
// over (else they count as spent when the leases expire).
func (g *Ledger) handOver(ctx context.Context, buckets []handedBucket, kept []handedKept) bool {
	data, err := json.Marshal(handover{Buckets: buckets, Kept: kept})
	if err != nil {
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, g.opt.Timeout)
	err = g.opt.Handovers.PutHandover(sctx, g.opt.Holder, data, g.ttl)
	cancel()
	if err != nil {
		if g.log != nil {
			g.log.Warn("cannot hand over the open bids: their leases end by their expiry and count as spent", "err", err)
		}
		return false
	}
	g.handedOver.Add(uint64(len(buckets)))
	return true
}
