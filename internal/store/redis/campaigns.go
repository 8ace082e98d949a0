package redis

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"tsubame"
)

// The campaign set, under Options.KeyPrefix, every key with one hash tag so
// that one script can write it:
//
//	{<prefix>campaigns}:version      the set's version, INCR'd by every write
//	{<prefix>campaigns}:currency     the set's currency
//	{<prefix>campaigns}:epoch        a random token naming the set's
//	                                 history, set by the first reader of a
//	                                 store without one (emptied: its
//	                                 versions start again from zero)
//	{<prefix>campaigns}:gen          the generation the set is in (absent:
//	                                 the first, whose hashes have no g:)
//	{<prefix>campaigns}:g:<gen>:advertisers  a hash of id -> JSON per kind:
//	{<prefix>campaigns}:g:<gen>:campaigns    advertisers, campaigns,
//	{<prefix>campaigns}:g:<gen>:creatives    creatives and line items of
//	{<prefix>campaigns}:g:<gen>:line_items   the generation
//	{<prefix>campaigns}:log          a stream: per write, its version (v) and
//	                                 the objects it changed (o, kind:id), or
//	                                 reset and the new generation (g) for a
//	                                 whole replace; about the last
//	                                 campaignLogLength writes
//	campaigns                        the pub/sub channel announcing writes
//
// (each key after the prefix itself). No command reads or writes the whole
// set, so that none holds Redis (and every budget, cap and bid that shares
// it) for long at any size. A Snapshot reads the generation's hashes in
// pages (HSCAN of campaignPage objects), then the log's writes made while
// it read, and reads those objects again. A ReplaceAll writes a new
// generation's hashes in pages (they expire unless swapped in), and a
// script makes it the set's: it sets gen, and gives the old generation's
// hashes an expiry long enough for the reads that began on them to end
// (oldGenerationTTL), so that a reader that began before the swap reads the
// old set whole, and a reader after it the new one. A write of one object
// (PutObject) reads the version and the objects it names (neighbourhood:
// a line item's campaign and creatives and their advertisers), checks the
// object against them in the process, and applies it with a script that
// first compares the version and the generation with those read: another
// writer in between makes it start again, so concurrent writers never
// leave a set that was not checked. A delete, and a campaign or creative
// moved to another advertiser, are checked so against the whole set (the
// objects that name them). A Lua script runs without any other command between
// its own, and its writes are replicated and persisted as one unit; the one
// failure it can meet half-way is Redis running out of memory (maxmemory)
// between two writes, which leaves the writes made so far. The scripts bump
// the version before their first write, so every node reads the set again
// after such a failure (the log misses that version); the next successful
// ReplaceAll repairs it. The log lets a node that holds the set follow its
// changes (ChangedSince) rather than read it again.

// campaignKinds orders the kinds' hashes in the scripts' KEYS (5 to 8).
var campaignKinds = tsubame.CampaignKinds

// campaignPage is how many objects one command reads or writes: a page of
// a few hundred kilobytes, about a millisecond of Redis.
const campaignPage = 500

// campaignLogLength is how many writes the log keeps (about): a node whose
// version is older than the oldest reads the whole set again.
const campaignLogLength = 10_000

// stagingTTL drops a generation that its import never swapped in (its
// writer died or lost a race to another writer).
const stagingTTL = time.Hour

// campaignRetries bounds how often a write starts again because another
// writer changed the set between its read and its write, and how often a
// read starts again.
const campaignRetries = 20

// The scripts' KEYS: version, currency, gen and log, then the generation's
// hashes (kindKeys), then for swapCampaigns the new generation's.
const (
	keyVersion = iota
	keyCurrency
	keyGen
	keyLog
	keyKinds // 4 to 7
)

// logWrite appends a write to the log (KEYS[4]): its new version and the
// objects of the script's triples from ARGV[first], or for a whole replace
// the new generation.
var logWrite = fmt.Sprintf(`
local function logWrite(nv, first, gen)
  local entry = {'v', nv}
  if gen then
    entry[#entry + 1] = 'reset'
    entry[#entry + 1] = gen
  else
    for i = first, #ARGV, 3 do
      entry[#entry + 1] = 'o'
      entry[#entry + 1] = ARGV[i] .. ':' .. ARGV[i + 1]
    end
  end
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', '%d', '*', unpack(entry))
end
`, campaignLogLength)

// writeCampaigns applies a change if the version is still ARGV[1] (or
// always, when ARGV[1] is empty) and the generation ARGV[2], and returns
// the new version, or -1 when another write came first. ARGV[3] is the
// channel to announce the new version on; from ARGV[4], triples of kind (1
// to 4), id and JSON ("" deletes).
var writeCampaigns = rueidis.NewLuaScript(logWrite + `
local v = redis.call('GET', KEYS[1]) or '0'
if ARGV[1] ~= '' and ARGV[1] ~= v then return -1 end
if (redis.call('GET', KEYS[3]) or '') ~= ARGV[2] then return -1 end
local nv = redis.call('INCR', KEYS[1])
for i = 4, #ARGV, 3 do
  local k = KEYS[4 + tonumber(ARGV[i])]
  if ARGV[i + 2] == '' then redis.call('HDEL', k, ARGV[i + 1]) else redis.call('HSET', k, ARGV[i + 1], ARGV[i + 2]) end
end
logWrite(nv, 4, nil)
redis.call('PUBLISH', ARGV[3], nv)
return nv`)

// swapCampaigns makes generation ARGV[3] (its hashes KEYS[9] to KEYS[12])
// the set's, if the version is still ARGV[1] (or always, when it is empty),
// and returns the new version; -1 when another write came first, -2 when
// the set is no longer in generation ARGV[2] (KEYS[5] to KEYS[8], whose
// hashes it gives ARGV[6] milliseconds to live), -3 when the new hashes do
// not hold ARGV[7] to ARGV[10] objects (a page lost, or expired before the
// swap). ARGV[4] is the channel, ARGV[5] the new currency ("" for none).
var swapCampaigns = rueidis.NewLuaScript(logWrite + `
local v = redis.call('GET', KEYS[1]) or '0'
if ARGV[1] ~= '' and ARGV[1] ~= v then return -1 end
if (redis.call('GET', KEYS[3]) or '') ~= ARGV[2] then return -2 end
for i = 9, 12 do
  if redis.call('HLEN', KEYS[i]) ~= tonumber(ARGV[i - 2]) then return -3 end
end
local nv = redis.call('INCR', KEYS[1])
for i = 5, 8 do
  redis.call('PEXPIRE', KEYS[i], ARGV[6])
  redis.call('PERSIST', KEYS[i + 4])
end
redis.call('SET', KEYS[3], ARGV[3])
if ARGV[5] == '' then redis.call('DEL', KEYS[2]) else redis.call('SET', KEYS[2], ARGV[5]) end
logWrite(nv, 0, ARGV[3])
redis.call('PUBLISH', ARGV[4], nv)
return nv`)

var (
	_ tsubame.CampaignStore   = (*Store)(nil)
	_ tsubame.CampaignFeed    = (*Store)(nil)
	_ tsubame.CampaignChanges = (*Store)(nil)
)

// campaignTag starts every key of the set.
func (s *Store) campaignTag() string {
	p := s.opt.KeyPrefix
	// Braces in the prefix would end the tag early; all keys would still
	// share one slot, but this one reads better.
	return p + "{" + strings.NewReplacer("{", "", "}", "").Replace(p) + "campaigns}:"
}

// campaignKeys returns the scripts' KEYS for generation gen: version,
// currency, gen, log, then the generation's hash of each kind.
func (s *Store) campaignKeys(gen string) []string {
	tag := s.campaignTag()
	keys := []string{tag + "version", tag + "currency", tag + "gen", tag + "log"}
	return append(keys, s.kindKeys(gen)...)
}

// kindKeys returns generation gen's hash of each kind.
func (s *Store) kindKeys(gen string) []string {
	tag := s.campaignTag()
	if gen != "" {
		tag += "g:" + gen + ":"
	}
	keys := make([]string, 0, len(campaignKinds))
	for _, k := range campaignKinds {
		keys = append(keys, tag+k.Plural())
	}
	return keys
}

func (s *Store) campaignChannel() string { return s.opt.KeyPrefix + "campaigns" }

func kindIndex(k tsubame.CampaignKind) (int, error) {
	if !k.Valid() {
		return 0, tsubame.Errorf(tsubame.EINVALID, "unknown kind %s", k)
	}
	return int(k) - 1, nil // KindAdvertiser (1) is kindKeys' first
}

func decodeObject(k tsubame.CampaignKind, b []byte) (tsubame.CampaignObject, error) {
	o := tsubame.NewCampaignObject(k)
	if err := json.Unmarshal(b, o); err != nil {
		return nil, tsubame.WrapError(tsubame.EINTERNAL, err, "corrupt %s record", k)
	}
	return o, nil
}

// do runs one command of a read or write of the set (a page of it),
// bounded by Options.Timeout unless the caller set a deadline: a whole
// read or import takes as many pages as the set has, each bounded.
func (s *Store) do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return s.c.Do(ctx, cmd)
}

// pagesCtx bounds n pipelined pages by n times Options.Timeout unless the
// caller set a deadline.
func (s *Store) pagesCtx(ctx context.Context, n int) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, time.Duration(n)*s.opt.Timeout)
}

// oldGenerationTTL is how long a replaced generation stays readable for
// the reads that began on it: a hundred times Options.Timeout, and a
// minute at least. A read that takes longer (a set of millions on a slow
// link) finds the generation expiring (generationKept) and starts again on
// the new one.
func (s *Store) oldGenerationTTL() time.Duration { return max(time.Minute, 100*s.opt.Timeout) }

// head is what a read of the set starts from.
type head struct {
	version  uint64
	currency string
	gen      string
	// epoch names the set's history: a random token set once, by the first
	// reader of a store that has none (a new one, or one emptied by other
	// means, whose versions start again from zero).
	epoch string
}

func (s *Store) readHead(ctx context.Context) (head, error) {
	keys := s.campaignKeys("")
	epochKey := s.campaignTag() + "epoch"
	res, err := s.do(ctx, s.c.B().Mget().Key(keys[keyVersion], keys[keyCurrency], keys[keyGen], epochKey).Build()).ToArray()
	if err != nil {
		return head{}, unavailable(err)
	}
	if len(res) != 4 {
		return head{}, tsubame.Errorf(tsubame.EINTERNAL, "MGET returned %d values", len(res))
	}
	var h head
	if v, err := res[0].ToString(); err == nil {
		if h.version, err = strconv.ParseUint(v, 10, 64); err != nil {
			return head{}, tsubame.WrapError(tsubame.EINTERNAL, err, "corrupt campaign version %q", v)
		}
	}
	h.currency, _ = res[1].ToString()
	h.gen, _ = res[2].ToString()
	if h.epoch, _ = res[3].ToString(); h.epoch == "" {
		var tok [12]byte
		if _, err := rand.Read(tok[:]); err != nil {
			return head{}, tsubame.WrapError(tsubame.EINTERNAL, err, "cannot name the campaign set's history")
		}
		// SET NX then GET: of two first readers, both take the one that landed.
		if err := s.do(ctx, s.c.B().Set().Key(epochKey).Value(hex.EncodeToString(tok[:])).Nx().Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
			return head{}, unavailable(err)
		}
		if h.epoch, err = s.do(ctx, s.c.B().Get().Key(epochKey).Build()).ToString(); err != nil {
			return head{}, unavailable(err)
		}
	}
	return h, nil
}

// HistoryChanged reports whether the set is no longer in the history this
// store answered version in (tsubame.CampaignHistory): Redis emptied, and
// perhaps written again to the same version since. False when the store
// does not remember version.
func (s *Store) HistoryChanged(ctx context.Context, version uint64) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	e, ok := s.answeredEpoch(version)
	if !ok {
		return false, nil
	}
	h, err := s.readHead(ctx)
	if err != nil {
		return false, err
	}
	return h.epoch != e, nil
}

// answeredVersions is how many of the versions Snapshot and ChangedSince
// answered the store remembers the history of (fromCopy): a follower's
// chain of answers stays in it beside other readers'.
const answeredVersions = 1024

// answered records that Snapshot or ChangedSince answered the set at
// version v of history epoch: a copy at that version (the engine's, which
// read it so) is of that history.
func (s *Store) answered(v uint64, epoch string) {
	s.answers.mu.Lock()
	defer s.answers.mu.Unlock()
	a := &s.answers
	if a.epochs == nil {
		a.epochs = make(map[uint64]string, answeredVersions)
	}
	if _, ok := a.epochs[v]; !ok {
		a.order = append(a.order, v)
		if len(a.order) > answeredVersions {
			delete(a.epochs, a.order[0])
			a.order = a.order[1:]
		}
	}
	a.epochs[v] = epoch
}

// answeredEpoch is the history of the set this store answered at version
// v, if it remembers it.
func (s *Store) answeredEpoch(v uint64) (string, bool) {
	s.answers.mu.Lock()
	defer s.answers.mu.Unlock()
	e, ok := s.answers.epochs[v]
	return e, ok
}

// objKey names an object of the set.
type objKey struct {
	kind tsubame.CampaignKind
	id   string
}

// scanKind reads every object of the hash key in pages (HSCAN), into set.
func (s *Store) scanKind(ctx context.Context, key string, k tsubame.CampaignKind, set *tsubame.CampaignSet) error {
	seen := map[string]bool{} // HSCAN may return a field twice
	for cursor := uint64(0); ; {
		e, err := s.do(ctx, s.c.B().Hscan().Key(key).Cursor(cursor).Count(campaignPage).Build()).AsScanEntry()
		if err != nil {
			return unavailable(err)
		}
		for j := 0; j+1 < len(e.Elements); j += 2 {
			if seen[e.Elements[j]] {
				continue
			}
			seen[e.Elements[j]] = true
			o, err := decodeObject(k, []byte(e.Elements[j+1]))
			if err != nil {
				return err
			}
			set.Add(o)
		}
		if cursor = e.Cursor; cursor == 0 {
			return nil
		}
	}
}

// loggedWrites are the log's writes after a version, up to the first
// whole replace: the objects they changed, the version of the last, and
// whether a replace followed.
type loggedWrites struct {
	changed map[objKey]bool
	last    uint64
	reset   bool
}

// logSince reads the log's writes after version since, in pages from the
// newest. It reports false when the log does not reach back to since (its
// oldest writes were trimmed, or a write failed half-way before logging):
// the set must be read whole.
func (s *Store) logSince(ctx context.Context, since uint64) (loggedWrites, bool, error) {
	key := s.campaignKeys("")[keyLog]
	type entry struct {
		v     uint64
		ops   []objKey
		reset bool
	}
	var newest []entry // newest first
	// Each page ends at the last one's oldest entry, included (exclusive
	// ranges need Redis 6.2), and skips it.
read:
	for end, last := "+", ""; ; {
		res, err := s.do(ctx, s.c.B().Xrevrange().Key(key).End(end).Start("-").Count(campaignPage).Build()).ToArray()
		if err != nil {
			return loggedWrites{}, false, unavailable(err)
		}
		for _, m := range res {
			e, err := m.AsXRangeSlice()
			if err != nil {
				return loggedWrites{}, false, unavailable(err)
			}
			if e.ID == last {
				continue
			}
			end, last = e.ID, e.ID
			var en entry
			for _, fv := range e.FieldValues {
				switch fv.Field {
				case "v":
					en.v, _ = strconv.ParseUint(fv.Value, 10, 64)
				case "reset":
					en.reset = true
				case "o":
					kind, id, _ := strings.Cut(fv.Value, ":")
					n, _ := strconv.Atoi(kind)
					en.ops = append(en.ops, objKey{tsubame.CampaignKind(n), id})
				}
			}
			if en.v <= since {
				break read
			}
			newest = append(newest, en)
		}
		if len(res) < campaignPage {
			break // the log's start
		}
	}
	// Whole when the writes run from since+1 without a version missing
	// (or there are none: the caller compares versions).
	for i, en := range newest {
		if i+1 < len(newest) && newest[i+1].v != en.v-1 {
			return loggedWrites{}, false, nil
		}
	}
	if len(newest) > 0 && newest[len(newest)-1].v != since+1 {
		return loggedWrites{}, false, nil
	}
	w := loggedWrites{changed: map[objKey]bool{}, last: since}
	for i := len(newest) - 1; i >= 0; i-- {
		if newest[i].reset {
			w.reset = true
			break
		}
		w.last = newest[i].v
		for _, o := range newest[i].ops {
			w.changed[o] = true
		}
	}
	return w, true, nil
}

// refetch reads the changed objects again from generation gen into set,
// replacing (or, deleted since, removing) what it holds of them.
func (s *Store) refetch(ctx context.Context, gen string, set *tsubame.CampaignSet, changed map[objKey]bool) error {
	if len(changed) == 0 {
		return nil
	}
	keys := s.kindKeys(gen)
	byKind := map[tsubame.CampaignKind][]string{}
	for o := range changed {
		byKind[o.kind] = append(byKind[o.kind], o.id)
	}
	var changes []tsubame.CampaignChange
	for k, ids := range byKind {
		i, err := kindIndex(k)
		if err != nil {
			return tsubame.Errorf(tsubame.EINTERNAL, "the campaign log names an %v", err)
		}
		for len(ids) > 0 {
			page := ids[:min(len(ids), campaignPage)]
			ids = ids[len(page):]
			vals, err := s.do(ctx, s.c.B().Hmget().Key(keys[i]).Field(page...).Build()).ToArray()
			if err != nil {
				return unavailable(err)
			}
			for j, v := range vals {
				c := tsubame.CampaignChange{Kind: k, ID: page[j]}
				b, err := v.AsBytes()
				switch {
				case rueidis.IsRedisNil(err): // deleted
				case err != nil:
					return unavailable(err)
				default:
					if c.Object, err = decodeObject(k, b); err != nil {
						return err
					}
				}
				changes = append(changes, c)
			}
		}
	}
	*set = *set.Apply(changes)
	return nil
}

// snapshot reads the whole set in pages, then the writes made meanwhile
// (the log), and returns the set, the version it is at and its generation
// (see the keys' comment). An object written after that version may be
// read at its newer state: a writer comparing the version then starts
// again.
func (s *Store) snapshot(ctx context.Context) (*tsubame.CampaignSet, head, error) {
	for range campaignRetries {
		h, err := s.readHead(ctx)
		if err != nil {
			return nil, head{}, err
		}
		set := &tsubame.CampaignSet{Currency: h.currency}
		keys := s.kindKeys(h.gen)
		for i, k := range campaignKinds {
			if err := s.scanKind(ctx, keys[i], k, set); err != nil {
				return nil, head{}, err
			}
		}
		whole := false
		for range campaignRetries {
			w, complete, err := s.logSince(ctx, h.version)
			if err != nil {
				return nil, head{}, err
			}
			if !complete {
				break
			}
			if err := s.refetch(ctx, h.gen, set, w.changed); err != nil {
				return nil, head{}, err
			}
			h.version = w.last
			if w.reset {
				// Replaced since: the old generation, read whole, at its
				// last version (it is no longer written), unless it
				// expired while it was read.
				whole, err = s.generationKept(ctx, h.gen)
				if err != nil {
					return nil, head{}, err
				}
				break
			}
			if len(w.changed) == 0 {
				whole = true
				break
			}
		}
		if whole {
			set.Sort()
			s.answered(h.version, h.epoch)
			return set, h, nil
		}
	}
	return nil, head{}, tsubame.Errorf(tsubame.EUNAVAILABLE, "the campaign set kept changing while it was read (%d attempts): try again", campaignRetries)
}

// generationKept reports whether a replaced generation's hashes are all
// still there (or were empty): not expired while a read took them.
func (s *Store) generationKept(ctx context.Context, gen string) (bool, error) {
	for _, key := range s.kindKeys(gen) {
		ttl, err := s.do(ctx, s.c.B().Pttl().Key(key).Build()).AsInt64()
		if err != nil {
			return false, unavailable(err)
		}
		if ttl >= 0 && ttl < s.oldGenerationTTL().Milliseconds()/2 {
			return false, nil // expiring: the read took too long to trust
		}
	}
	return true, nil
}

// ChangedSince returns what the writes after version changed: each object
// written (nil Object: deleted) once, at its state now, and the version
// they bring the set to. It reports false when the log no longer reaches
// back to version or a write since replaced the whole set: read a
// Snapshot.
func (s *Store) ChangedSince(ctx context.Context, version uint64) ([]tsubame.CampaignChange, uint64, bool, error) {
	if err := s.check(); err != nil {
		return nil, 0, false, err
	}
	// The generation first: when the log then shows no replace since
	// version, the objects are read from the generation they were
	// written in, even if a replace comes meanwhile.
	h, err := s.readHead(ctx)
	if err != nil {
		return nil, 0, false, err
	}
	if e, ok := s.answeredEpoch(version); ok && e != h.epoch {
		return nil, 0, false, nil // version was answered in a history the store lost
	}
	if h.version == version {
		return nil, version, true, nil
	}
	w, complete, err := s.logSince(ctx, version)
	if err != nil || !complete || w.reset || w.last == version {
		return nil, 0, false, err
	}
	set := &tsubame.CampaignSet{}
	if err := s.refetch(ctx, h.gen, set, w.changed); err != nil {
		return nil, 0, false, err
	}
	out := make([]tsubame.CampaignChange, 0, len(w.changed))
	byKey := set.ObjectIndex() // changes of a large import: one lookup each, not a scan
	for o := range w.changed {
		out = append(out, tsubame.CampaignChange{Kind: o.kind, ID: o.id, Object: byKey[tsubame.ObjectKey{Kind: o.kind, ID: o.id}]})
	}
	slices.SortFunc(out, func(a, b tsubame.CampaignChange) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), strings.Compare(a.ID, b.ID))
	})
	// A reader whose copy at version this store answered in this history
	// holds the set at w.last with these: a copy of it may check writes.
	if e, ok := s.answeredEpoch(version); ok && e == h.epoch {
		s.answered(w.last, h.epoch)
	}
	return out, w.last, true, nil
}

// change reads the set, lets apply check the change against it and return
// the script's operations, and writes them if nobody wrote in between. With
// at set, the set must be at that version, read or written (ECONFLICT
// otherwise, and no retry: the caller's change was made against it).
func (s *Store) change(ctx context.Context, at *uint64, apply func(set *tsubame.CampaignSet) ([]string, error)) error {
	if err := s.check(); err != nil {
		return err
	}
	for range campaignRetries {
		set, h, err := s.wholeSet(ctx)
		if err != nil {
			return err
		}
		if at != nil && h.version != *at {
			return tsubame.CampaignsChanged(*at)
		}
		ops, err := apply(set)
		if err != nil {
			return err
		}
		if wrote, err := s.writeAt(ctx, h, ops); err != nil || wrote {
			return err
		}
		if at != nil {
			return tsubame.CampaignsChanged(*at)
		}
	}
	return tsubame.Errorf(tsubame.EUNAVAILABLE, "the campaign set kept changing under this write (%d attempts): try again", campaignRetries)
}

// UseCampaignCopy makes the writes that are checked against the whole set
// (deletes of campaigns, creatives and advertisers, and moves to another
// advertiser) check against copy's set brought to the store's version
// with the log, rather than read the set (tsubame.CampaignCopies).
func (s *Store) UseCampaignCopy(copy func() (*tsubame.CampaignSet, uint64)) {
	s.copy.Store(&copy)
}

// wholeSet returns the set, whole, for a write to be checked against, and
// the head it is at: the process's copy brought to the store's version
// (fromCopy) when it can be, else a read of the set (snapshot).
func (s *Store) wholeSet(ctx context.Context) (*tsubame.CampaignSet, head, error) {
	if f := s.copy.Load(); f != nil {
		if set, h, ok, err := s.fromCopy(ctx, *f); err != nil || ok {
			return set, h, err
		}
	}
	return s.snapshot(ctx)
}

// fromCopy brings copy's set to the store's version: the objects the log
// names after the copy's version are read again, as a node following the
// set does. Every object the copy holds newer than its version is among
// them, and every object read newer than the version returned moves the
// version past it, so that the write's script refuses a check made on
// anything but the set at that version. It reports false when the log
// cannot bring the copy there (trimmed, a replace since, or no copy).
func (s *Store) fromCopy(ctx context.Context, copy func() (*tsubame.CampaignSet, uint64)) (*tsubame.CampaignSet, head, bool, error) {
	held, v := copy()
	if held == nil {
		return nil, head{}, false, nil
	}
	h, err := s.readHead(ctx)
	if err != nil {
		return nil, head{}, false, err
	}
	// The same version number in another history (a store emptied and
	// written again) is another set: the copy must be one this store read
	// in the history it is in now.
	if epoch, ok := s.answeredEpoch(v); !ok || epoch != h.epoch {
		return nil, head{}, false, nil
	}
	set := *held // a shallow copy: Put, Delete and refetch replace what they change
	if h.version == v {
		return &set, h, true, nil
	}
	w, complete, err := s.logSince(ctx, v)
	// w.last below the head's version: a write failed half-way before it
	// logged (see the keys' comment); the set is read whole.
	if err != nil || !complete || w.reset || w.last == v || w.last < h.version {
		return nil, head{}, false, err
	}
	if err := s.refetch(ctx, h.gen, &set, w.changed); err != nil {
		return nil, head{}, false, err
	}
	h.version = w.last
	return &set, h, true, nil
}

// writeAt runs the write script's ops if the set is still at h's version
// and generation; false when another write came first.
func (s *Store) writeAt(ctx context.Context, h head, ops []string) (bool, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	args := append([]string{strconv.FormatUint(h.version, 10), h.gen, s.campaignChannel()}, ops...)
	n, err := writeCampaigns.Exec(ctx, s.c, s.campaignKeys(h.gen), args).AsInt64()
	if err != nil {
		return false, unavailable(err)
	}
	return n >= 0, nil
}

// putOps are the write script's ops that write o.
func putOps(o tsubame.CampaignObject) ([]string, error) {
	v, err := json.Marshal(o)
	if err != nil {
		return nil, tsubame.WrapError(tsubame.EINTERNAL, err, "cannot encode %s %q", o.Kind(), o.ObjectID())
	}
	return []string{kindArg(o.Kind()), o.ObjectID(), string(v)}, nil
}

func kindArg(k tsubame.CampaignKind) string { return strconv.Itoa(int(k)) }

// kindKey returns the current generation's hash of kind k.
func (s *Store) kindKey(ctx context.Context, k tsubame.CampaignKind) (string, error) {
	i, err := kindIndex(k)
	if err != nil {
		return "", err
	}
	gen, err := s.do(ctx, s.c.B().Get().Key(s.campaignKeys("")[keyGen]).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return "", unavailable(err)
	}
	return s.kindKeys(gen)[i], nil
}

// GetObject reads the object of kind k with the given id.
func (s *Store) GetObject(ctx context.Context, k tsubame.CampaignKind, id string) (tsubame.CampaignObject, error) {
	if _, err := kindIndex(k); err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	for range campaignRetries {
		key, err := s.kindKey(ctx, k)
		if err != nil {
			return nil, err
		}
		b, err := s.do(ctx, s.c.B().Hget().Key(key).Field(id).Build()).AsBytes()
		if rueidis.IsRedisNil(err) {
			// Not there, or its generation expired between the two reads
			// (a replace more than oldGenerationTTL ago): look again.
			if again, err := s.kindKey(ctx, k); err != nil || again != key {
				continue
			}
			return nil, tsubame.Errorf(tsubame.ENOTFOUND, "%s %q not found", k, id)
		}
		if err != nil {
			return nil, unavailable(err)
		}
		return decodeObject(k, b)
	}
	return nil, tsubame.Errorf(tsubame.EUNAVAILABLE, "the campaign set kept being replaced while %s %q was read: try again", k, id)
}

// ListObjects reads every object of kind k, in id order, in pages.
func (s *Store) ListObjects(ctx context.Context, k tsubame.CampaignKind) ([]tsubame.CampaignObject, error) {
	if _, err := kindIndex(k); err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	set, _, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return set.Objects(k), nil
}

// PutObject writes o if the set stays valid (see the keys' comment).
func (s *Store) PutObject(ctx context.Context, o tsubame.CampaignObject) error {
	return s.putObject(ctx, nil, o)
}

// PutObjectAt is PutObject if the set is still at version, compared by the
// script that writes.
func (s *Store) PutObjectAt(ctx context.Context, o tsubame.CampaignObject, version uint64) error {
	return s.putObject(ctx, &version, o)
}

func (s *Store) putObject(ctx context.Context, at *uint64, o tsubame.CampaignObject) error {
	if o == nil || reflectNil(o) {
		return tsubame.Errorf(tsubame.EINVALID, "no campaign object given")
	}
	if err := s.check(); err != nil {
		return err
	}
	for range campaignRetries {
		h, err := s.readHead(ctx)
		if err != nil {
			return err
		}
		if at != nil && h.version != *at {
			return tsubame.CampaignsChanged(*at)
		}
		set, ok, err := s.neighbourhood(ctx, h.gen, o)
		if err != nil {
			return err
		}
		if !ok {
			break // a move to another advertiser: checked against the whole set
		}
		if err := set.Put(o); err != nil {
			return err
		}
		ops, err := putOps(o)
		if err != nil {
			return err
		}
		// The objects were read after the version: a write in between moves
		// it, and this one starts again on what that write left.
		if wrote, err := s.writeAt(ctx, h, ops); err != nil || wrote {
			return err
		}
		if at != nil {
			return tsubame.CampaignsChanged(*at)
		}
	}
	return s.change(ctx, at, func(set *tsubame.CampaignSet) ([]string, error) {
		if err := set.Put(o); err != nil {
			return nil, err
		}
		return putOps(o)
	})
}

// neighbourhood reads, from generation gen, what a write of o is checked
// against (CampaignSet.Put): the objects it names and the advertisers of
// those, without the rest of the set, so that a write of one object reads
// a few whatever the set's size. It reports false when o is a campaign or
// creative moved to another advertiser: the line items that name it must
// be checked too, against the whole set.
func (s *Store) neighbourhood(ctx context.Context, gen string, o tsubame.CampaignObject) (*tsubame.CampaignSet, bool, error) {
	set := &tsubame.CampaignSet{}
	get := func(k tsubame.CampaignKind, ids ...string) error {
		if len(ids) == 0 {
			return nil
		}
		want := map[objKey]bool{}
		for _, id := range ids {
			want[objKey{k, id}] = true
		}
		return s.refetch(ctx, gen, set, want)
	}
	moved := func(k tsubame.CampaignKind, adv string) (bool, error) {
		if err := get(k, o.ObjectID()); err != nil {
			return false, err
		}
		var was string
		switch old := set.Object(k, o.ObjectID()).(type) {
		case *tsubame.Campaign:
			was = old.Advertiser
		case *tsubame.Creative:
			was = old.Advertiser
		default:
			return false, nil // new
		}
		return was != adv, nil
	}
	var advs []string
	switch o := o.(type) {
	case *tsubame.Advertiser:
	case *tsubame.Campaign:
		if m, err := moved(tsubame.KindCampaign, o.Advertiser); err != nil || m {
			return nil, false, err
		}
		advs = append(advs, o.Advertiser)
	case *tsubame.Creative:
		if m, err := moved(tsubame.KindCreative, o.Advertiser); err != nil || m {
			return nil, false, err
		}
		advs = append(advs, o.Advertiser)
	case *tsubame.LineItem:
		if err := get(tsubame.KindCampaign, o.Campaign); err != nil {
			return nil, false, err
		}
		if err := get(tsubame.KindCreative, o.Creatives...); err != nil {
			return nil, false, err
		}
		for _, c := range set.Campaigns {
			advs = append(advs, c.Advertiser)
		}
		for _, c := range set.Creatives {
			advs = append(advs, c.Advertiser)
		}
	default:
		return nil, false, tsubame.Errorf(tsubame.EINVALID, "unknown kind %s", o.Kind())
	}
	slices.Sort(advs)
	if err := get(tsubame.KindAdvertiser, slices.Compact(advs)...); err != nil {
		return nil, false, err
	}
	return set, true, nil
}

// reflectNil reports whether o is a typed nil pointer.
func reflectNil(o tsubame.CampaignObject) bool {
	switch o := o.(type) {
	case *tsubame.Advertiser:
		return o == nil
	case *tsubame.Campaign:
		return o == nil
	case *tsubame.Creative:
		return o == nil
	case *tsubame.LineItem:
		return o == nil
	}
	return false
}

// DeleteObject removes an object nothing refers to.
func (s *Store) DeleteObject(ctx context.Context, k tsubame.CampaignKind, id string) error {
	if !k.Valid() {
		return tsubame.Errorf(tsubame.EINVALID, "unknown kind %s", k)
	}
	if k == tsubame.KindLineItem {
		return s.deleteLineItem(ctx, id)
	}
	return s.change(ctx, nil, func(set *tsubame.CampaignSet) ([]string, error) {
		if err := set.Delete(k, id); err != nil {
			return nil, err
		}
		return []string{kindArg(k), id, ""}, nil
	})
}

// deleteLineItem deletes line item id reading it alone: nothing names a
// line item, so no reference can be left dangling (a campaign's, a
// creative's or an advertiser's delete reads the set for what names it).
func (s *Store) deleteLineItem(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	for range campaignRetries {
		h, err := s.readHead(ctx)
		if err != nil {
			return err
		}
		set := &tsubame.CampaignSet{}
		if err := s.refetch(ctx, h.gen, set, map[objKey]bool{{tsubame.KindLineItem, id}: true}); err != nil {
			return err
		}
		if err := set.Delete(tsubame.KindLineItem, id); err != nil {
			return err // not found
		}
		if wrote, err := s.writeAt(ctx, h, []string{kindArg(tsubame.KindLineItem), id, ""}); err != nil || wrote {
			return err
		}
	}
	return tsubame.Errorf(tsubame.EUNAVAILABLE, "the campaign set kept changing under this write (%d attempts): try again", campaignRetries)
}

// ReplaceAll validates set, writes it as a new generation in pages and
// swaps it in with one script (see the keys' comment).
func (s *Store) ReplaceAll(ctx context.Context, set *tsubame.CampaignSet) error {
	return s.replaceAll(ctx, nil, set, nil)
}

// ReplaceAllAt is ReplaceAll if the set is still at version, compared by
// the script that swaps.
func (s *Store) ReplaceAllAt(ctx context.Context, set *tsubame.CampaignSet, version uint64) error {
	return s.replaceAll(ctx, &version, set, nil)
}

// ReplaceAllRebasing is ReplaceAllAt carrying the writes made since
// version into the replace (tsubame.CampaignRebases): when the swap finds
// the set moved, the writes since are read from the log, rebase says what
// to write instead, and the objects they changed are written again into
// the staged generation before the swap is tried at the new version.
func (s *Store) ReplaceAllRebasing(ctx context.Context, set *tsubame.CampaignSet, version uint64, rebase tsubame.CampaignRebase) error {
	return s.replaceAll(ctx, &version, set, rebase)
}

func (s *Store) replaceAll(ctx context.Context, at *uint64, set *tsubame.CampaignSet, rebase tsubame.CampaignRebase) error {
	if err := set.Validate(); err != nil {
		return err
	}
	if err := s.check(); err != nil {
		return err
	}
	var tok [8]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return tsubame.WrapError(tsubame.EINTERNAL, err, "cannot name a generation")
	}
	gen := hex.EncodeToString(tok[:])
	fresh := s.kindKeys(gen)
	// The new generation's hashes, a page a command, pipelined; each
	// expires unless swapped in.
	if err := s.stage(ctx, fresh, set, nil); err != nil {
		s.unlink(fresh...)
		return err
	}
	var version uint64
	if at != nil {
		version = *at
	}
	for range campaignRetries {
		expect := ""
		if at != nil {
			expect = strconv.FormatUint(version, 10)
		}
		h, err := s.readHead(ctx)
		if err != nil {
			s.unlink(fresh...)
			return err
		}
		keys := append(s.campaignKeys(h.gen), fresh...)
		args := []string{expect, h.gen, gen, s.campaignChannel(), set.Currency,
			strconv.FormatInt(s.oldGenerationTTL().Milliseconds(), 10)}
		for _, k := range campaignKinds {
			args = append(args, strconv.Itoa(len(set.Objects(k))))
		}
		sctx, cancel := s.ctx(ctx)
		n, err := swapCampaigns.Exec(sctx, s.c, keys, args).AsInt64()
		cancel()
		switch {
		case err != nil:
			return unavailable(err) // swapped or not: the new hashes expire unless they were
		case n == -1 && rebase != nil:
			if set, version, err = s.rebase(ctx, fresh, version, rebase); err != nil {
				s.unlink(fresh...)
				return err
			}
		case n == -1:
			s.unlink(fresh...)
			return tsubame.CampaignsChanged(version)
		case n == -3:
			s.unlink(fresh...)
			return tsubame.Errorf(tsubame.EUNAVAILABLE, "the import's pages did not all reach the store (or expired before the swap, %v after the first): nothing was imported; try again", stagingTTL)
		case n >= 0:
			return nil
		} // -2: another import swapped between the read of the generation and this one
	}
	s.unlink(fresh...)
	return tsubame.Errorf(tsubame.EUNAVAILABLE, "the campaign set kept changing under this import (%d attempts: other imports, or writes faster than it could take them in): try again", campaignRetries)
}

// stage writes set's objects into the staged generation's hashes fresh, a
// page a command, pipelined, each hash expiring unless swapped in: every
// object, or with only set, those it names (removing those of them set
// lacks).
func (s *Store) stage(ctx context.Context, fresh []string, set *tsubame.CampaignSet, only map[objKey]bool) error {
	var cmds rueidis.Commands
	for i, k := range campaignKinds {
		objs := set.Objects(k)
		var gone []string
		if only != nil {
			objs = slices.DeleteFunc(objs, func(o tsubame.CampaignObject) bool { return !only[objKey{k, o.ObjectID()}] })
			for o := range only {
				if o.kind == k && !slices.ContainsFunc(objs, func(x tsubame.CampaignObject) bool { return x.ObjectID() == o.id }) {
					gone = append(gone, o.id)
				}
			}
		}
		for len(gone) > 0 {
			page := gone[:min(len(gone), campaignPage)]
			gone = gone[len(page):]
			cmds = append(cmds, s.c.B().Hdel().Key(fresh[i]).Field(page...).Build())
		}
		for first := true; len(objs) > 0; first = false {
			page := objs[:min(len(objs), campaignPage)]
			objs = objs[len(page):]
			fv := s.c.B().Hset().Key(fresh[i]).FieldValue()
			for _, o := range page {
				v, err := json.Marshal(o)
				if err != nil {
					return tsubame.WrapError(tsubame.EINTERNAL, err, "cannot encode %s %q", k, o.ObjectID())
				}
				fv = fv.FieldValue(o.ObjectID(), string(v))
			}
			cmds = append(cmds, fv.Build())
			if first {
				cmds = append(cmds, s.c.B().Pexpire().Key(fresh[i]).Milliseconds(stagingTTL.Milliseconds()).Build())
			}
		}
	}
	for len(cmds) > 0 {
		batch := cmds[:min(len(cmds), 16)]
		cmds = cmds[len(batch):]
		bctx, cancel := s.pagesCtx(ctx, len(batch))
		res := s.c.DoMulti(bctx, batch...)
		cancel()
		for _, r := range res {
			if err := r.Error(); err != nil {
				return unavailable(err)
			}
		}
	}
	return nil
}

// rebase carries the writes made since version into the staged generation
// (fresh): rebase returns the set to write with them, whose references are
// checked, and the objects they changed are staged again. It returns
// that set and the version the writes bring the store to; ECONFLICT when
// the log cannot say what changed (a replace since, or trimmed).
func (s *Store) rebase(ctx context.Context, fresh []string, version uint64, rebase tsubame.CampaignRebase) (*tsubame.CampaignSet, uint64, error) {
	changes, now, ok, err := s.ChangedSince(ctx, version)
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		return nil, 0, tsubame.CampaignsChanged(version)
	}
	next, err := rebase(changes)
	if err != nil {
		return nil, 0, err
	}
	// The set staged was checked whole, and each write since by the store:
	// what they can break together is a reference (a campaign deleted
	// that the file's line item names).
	if err := next.ValidateRefs(); err != nil {
		return nil, 0, err
	}
	only := make(map[objKey]bool, len(changes))
	for _, c := range changes {
		only[objKey{c.Kind, c.ID}] = true
	}
	if err := s.stage(ctx, fresh, next, only); err != nil {
		return nil, 0, err
	}
	return next, now, nil
}

// unlink frees keys off Redis's main thread (UNLINK), whatever the
// caller's context: the hashes of a generation never swapped in.
func (s *Store) unlink(keys ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opt.Timeout)
	defer cancel()
	for _, k := range keys {
		_ = s.c.Do(ctx, s.c.B().Unlink().Key(k).Build()).Error()
	}
}

// Snapshot reads the whole set in pages, and the version it is at.
func (s *Store) Snapshot(ctx context.Context) (*tsubame.CampaignSet, uint64, error) {
	if err := s.check(); err != nil {
		return nil, 0, err
	}
	set, h, err := s.snapshot(ctx)
	if err != nil {
		return nil, 0, err
	}
	return set, h.version, nil
}

// CampaignsVersion reads the set's version.
func (s *Store) CampaignsVersion(ctx context.Context) (uint64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	n, err := s.do(ctx, s.c.B().Get().Key(s.campaignKeys("")[keyVersion]).Build()).AsUint64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	return n, unavailable(err)
}

// WatchCampaigns calls changed for every write to the set any process
// announces, and each time the subscription is re-established after the
// first (announcements meanwhile were lost), until ctx ends. It returns
// ctx's error.
func (s *Store) WatchCampaigns(ctx context.Context, changed func()) error {
	return s.subscribe(ctx, s.campaignChannel(), func(string) { changed() }, func() {
		changed()
		s.opt.Logger.Info("redis campaign channel resubscribed; the campaign set will be read again")
	})
}
