package redis

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"tsubame"
)

// The campaign set, under Options.KeyPrefix, every key with one hash tag so
// that the whole set lives in one Redis Cluster slot and one script can
// write it:
//
//	{<prefix>campaigns}:version      the set's version, INCR'd by every write
//	{<prefix>campaigns}:currency     the set's currency
//	{<prefix>campaigns}:advertisers  a hash of id -> JSON, one per kind
//	{<prefix>campaigns}:campaigns
//	{<prefix>campaigns}:creatives
//	{<prefix>campaigns}:line_items
//	campaigns                        the pub/sub channel announcing writes
//
// (each key after the prefix itself). One slot holds the whole set: fine for
// the tens of thousands of objects an account has, and the price of atomic
// writes on a cluster. A write reads the set (one script), checks the change
// against it in the process, and applies it with a second script that first
// compares the version with the one read: another writer in between makes
// it start again, so concurrent writers never leave a set that was not
// checked. A Lua script runs without any other command between its own, and
// its writes are replicated and persisted as one unit; the one failure it
// can meet half-way is Redis running out of memory (maxmemory) between two
// writes, which leaves the writes made so far. The script bumps the version
// before its first write, so every node reads the set again after such a
// failure; the next successful ReplaceAll repairs it. While a script runs
// Redis serves no other command, so a ReplaceAll of a large set holds every
// client of that Redis (or of that cluster master) for as long as it takes
// to write it: import large sets off-peak.

// campaignKinds orders the kinds' hashes in the scripts' KEYS (3 to 6).
var campaignKinds = tsubame.CampaignKinds

// readCampaigns returns {version, currency, HGETALL of each kind's hash}.
var readCampaigns = rueidis.NewLuaScriptReadOnly(`
local out = {redis.call('GET', KEYS[1]) or '0', redis.call('GET', KEYS[2]) or ''}
for i = 3, 6 do out[#out + 1] = redis.call('HGETALL', KEYS[i]) end
return out`)

// writeCampaigns applies a change if the version is still ARGV[1] (or
// always, when ARGV[1] is empty) and returns the new version, or -1 when
// another write came first. ARGV[2] is "1" to replace the whole set (the
// hashes are emptied first and ARGV[4] is the new currency, "" for none);
// ARGV[3] is the channel to announce the new version on; from ARGV[5],
// triples of kind (1 to 4), id and JSON ("" deletes).
var writeCampaigns = rueidis.NewLuaScript(`
local v = redis.call('GET', KEYS[1]) or '0'
if ARGV[1] ~= '' and ARGV[1] ~= v then return -1 end
local nv = redis.call('INCR', KEYS[1])
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6])
  if ARGV[4] == '' then redis.call('DEL', KEYS[2]) else redis.call('SET', KEYS[2], ARGV[4]) end
end
for i = 5, #ARGV, 3 do
  local k = KEYS[2 + tonumber(ARGV[i])]
  if ARGV[i + 2] == '' then redis.call('HDEL', k, ARGV[i + 1]) else redis.call('HSET', k, ARGV[i + 1], ARGV[i + 2]) end
end
redis.call('PUBLISH', ARGV[3], nv)
return nv`)

// campaignRetries bounds how often a write starts again because another
// writer changed the set between its read and its write.
const campaignRetries = 20

var (
	_ tsubame.CampaignStore = (*Store)(nil)
	_ tsubame.CampaignFeed  = (*Store)(nil)
)

// campaignKeys returns the scripts' KEYS: version, currency and one hash per kind.
func (s *Store) campaignKeys() []string {
	p := s.opt.KeyPrefix
	// Braces in the prefix would end the tag early; all keys would still
	// share one slot, but this one reads better.
	tag := p + "{" + strings.NewReplacer("{", "", "}", "").Replace(p) + "campaigns}:"
	keys := []string{tag + "version", tag + "currency"}
	for _, k := range campaignKinds {
		keys = append(keys, tag+k.Plural())
	}
	return keys
}

func (s *Store) campaignChannel() string { return s.opt.KeyPrefix + "campaigns" }

func kindKey(keys []string, k tsubame.CampaignKind) (string, error) {
	if !k.Valid() {
		return "", tsubame.Errorf(tsubame.EINVALID, "unknown kind %s", k)
	}
	return keys[1+int(k)], nil // KindAdvertiser (1) is KEYS[3], keys[2]
}

func decodeObject(k tsubame.CampaignKind, b []byte) (tsubame.CampaignObject, error) {
	o := tsubame.NewCampaignObject(k)
	if err := json.Unmarshal(b, o); err != nil {
		return nil, tsubame.WrapError(tsubame.EINTERNAL, err, "corrupt %s record", k)
	}
	return o, nil
}

// longCtx bounds a command that carries the whole set (a snapshot, a
// ReplaceAll) by ten times Options.Timeout unless the caller set a deadline.
func (s *Store) longCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, 10*s.opt.Timeout)
}

// snapshot reads the whole set and its version in one script.
func (s *Store) snapshot(ctx context.Context) (*tsubame.CampaignSet, string, error) {
	ctx, cancel := s.longCtx(ctx)
	defer cancel()
	res, err := readCampaigns.Exec(ctx, s.c, s.campaignKeys(), nil).ToArray()
	if err != nil {
		return nil, "", unavailable(err)
	}
	if len(res) != 2+len(campaignKinds) {
		return nil, "", tsubame.Errorf(tsubame.EINTERNAL, "campaign read script returned %d values", len(res))
	}
	version, _ := res[0].ToString()
	currency, _ := res[1].ToString()
	set := &tsubame.CampaignSet{Currency: currency}
	for i, k := range campaignKinds {
		flat, err := res[2+i].AsStrSlice()
		if err != nil {
			return nil, "", unavailable(err)
		}
		for j := 1; j < len(flat); j += 2 {
			o, err := decodeObject(k, []byte(flat[j]))
			if err != nil {
				return nil, "", err
			}
			set.Add(o)
		}
	}
	set.Sort()
	return set, version, nil
}

// write runs the write script; it reports false when the version moved.
func (s *Store) writeSet(ctx context.Context, expect string, replace bool, currency string, ops []string) (bool, error) {
	ctx, cancel := s.longCtx(ctx)
	defer cancel()
	args := append([]string{expect, "0", s.campaignChannel(), currency}, ops...)
	if replace {
		args[1] = "1"
	}
	n, err := writeCampaigns.Exec(ctx, s.c, s.campaignKeys(), args).AsInt64()
	if err != nil {
		return false, unavailable(err)
	}
	return n >= 0, nil
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
		set, version, err := s.snapshot(ctx)
		if err != nil {
			return err
		}
		if at != nil && version != strconv.FormatUint(*at, 10) {
			return tsubame.CampaignsChanged(*at)
		}
		ops, err := apply(set)
		if err != nil {
			return err
		}
		ok, err := s.writeSet(ctx, version, false, "", ops)
		if err != nil || ok {
			return err
		}
		if at != nil {
			return tsubame.CampaignsChanged(*at)
		}
	}
	return tsubame.Errorf(tsubame.EUNAVAILABLE, "the campaign set kept changing under this write (%d attempts): try again", campaignRetries)
}

func kindArg(k tsubame.CampaignKind) string { return strconv.Itoa(int(k)) }

// GetObject reads the object of kind k with the given id.
func (s *Store) GetObject(ctx context.Context, k tsubame.CampaignKind, id string) (tsubame.CampaignObject, error) {
	key, err := kindKey(s.campaignKeys(), k)
	if err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	b, err := s.c.Do(ctx, s.c.B().Hget().Key(key).Field(id).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, tsubame.Errorf(tsubame.ENOTFOUND, "%s %q not found", k, id)
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return decodeObject(k, b)
}

// ListObjects reads every object of kind k, in id order.
func (s *Store) ListObjects(ctx context.Context, k tsubame.CampaignKind) ([]tsubame.CampaignObject, error) {
	key, err := kindKey(s.campaignKeys(), k)
	if err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	m, err := s.c.Do(ctx, s.c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		return nil, unavailable(err)
	}
	set := &tsubame.CampaignSet{}
	for _, v := range m {
		o, err := decodeObject(k, []byte(v))
		if err != nil {
			return nil, err
		}
		set.Add(o)
	}
	set.Sort()
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
	return s.change(ctx, at, func(set *tsubame.CampaignSet) ([]string, error) {
		if err := set.Put(o); err != nil {
			return nil, err
		}
		v, err := json.Marshal(o)
		if err != nil {
			return nil, tsubame.WrapError(tsubame.EINTERNAL, err, "cannot encode %s %q", o.Kind(), o.ObjectID())
		}
		return []string{kindArg(o.Kind()), o.ObjectID(), string(v)}, nil
	})
}

// DeleteObject removes an object nothing refers to.
func (s *Store) DeleteObject(ctx context.Context, k tsubame.CampaignKind, id string) error {
	if !k.Valid() {
		return tsubame.Errorf(tsubame.EINVALID, "unknown kind %s", k)
	}
	return s.change(ctx, nil, func(set *tsubame.CampaignSet) ([]string, error) {
		if err := set.Delete(k, id); err != nil {
			return nil, err
		}
		return []string{kindArg(k), id, ""}, nil
	})
}

// ReplaceAll validates set and writes it with one script (see the keys'
// comment for what a failure half-way leaves).
func (s *Store) ReplaceAll(ctx context.Context, set *tsubame.CampaignSet) error {
	return s.replaceAll(ctx, nil, set)
}

// ReplaceAllAt is ReplaceAll if the set is still at version, compared by
// the script that writes.
func (s *Store) ReplaceAllAt(ctx context.Context, set *tsubame.CampaignSet, version uint64) error {
	return s.replaceAll(ctx, &version, set)
}

func (s *Store) replaceAll(ctx context.Context, at *uint64, set *tsubame.CampaignSet) error {
	if err := set.Validate(); err != nil {
		return err
	}
	if err := s.check(); err != nil {
		return err
	}
	ops := make([]string, 0, 3*set.Len())
	for _, k := range campaignKinds {
		for _, o := range set.Objects(k) {
			v, err := json.Marshal(o)
			if err != nil {
				return tsubame.WrapError(tsubame.EINTERNAL, err, "cannot encode %s %q", k, o.ObjectID())
			}
			ops = append(ops, kindArg(k), o.ObjectID(), string(v))
		}
	}
	expect := ""
	if at != nil {
		expect = strconv.FormatUint(*at, 10)
	}
	ok, err := s.writeSet(ctx, expect, true, set.Currency, ops)
	if err == nil && !ok {
		err = tsubame.CampaignsChanged(*at)
	}
	return err
}

// Snapshot reads the whole set and its version with one script.
func (s *Store) Snapshot(ctx context.Context) (*tsubame.CampaignSet, uint64, error) {
	if err := s.check(); err != nil {
		return nil, 0, err
	}
	set, version, err := s.snapshot(ctx)
	if err != nil {
		return nil, 0, err
	}
	v, err := strconv.ParseUint(version, 10, 64)
	if err != nil {
		return nil, 0, tsubame.WrapError(tsubame.EINTERNAL, err, "corrupt campaign version %q", version)
	}
	return set, v, nil
}

// CampaignsVersion reads the set's version.
func (s *Store) CampaignsVersion(ctx context.Context) (uint64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	n, err := s.c.Do(ctx, s.c.B().Get().Key(s.campaignKeys()[0]).Build()).AsUint64()
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
