package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"tsubame"
)

// The rtb scenario: the OpenRTB 2.6 specification's example 6.2.3 (a
// 728×90 banner in the app 12345, with blocked categories and advertisers
// and a floor of 0.50), posted at c=64 with keep-alive to Tsubame's bidder
// (POST /rtb/bench) and, interleaved, to an nginx + Lua bidder doing the
// same matching with lua-cjson (seed 004's stack: the write-ups' DSP
// rewrote such a bidder from Lua + C into Go). Both load one campaign file
// (rtbSet) and answer a bid with signed win, billing and loss URLs and a
// line in their access log.
const (
	rtbAdvertisers = 100
	rtbLineItems   = 1000
	rtbApps        = 200
	rtbSites       = 200
	rtbConns       = 64
)

// rtbExample is example 6.2.3 of OpenRTB 2.6 (2.6.md, CC BY 3.0), verbatim.
const rtbExample = `{
  "id": "IxexyLDIIk",
  "at": 2,
  "bcat": ["IAB25", "IAB7-39", "IAB8-18", "IAB8-5", "IAB9-9"],
  "badv": ["apple.com", "go-text.me", "heywire.com"],
  "imp": [{"id": "1", "bidfloor": 0.5, "instl": 0, "tagid": "agltb3B1Yi1pbmNyDQsSBFNpdGUY7fD0FAw",
    "banner": {"w": 728, "h": 90, "pos": 1, "btype": [4], "battr": [14], "api": [3]}}],
  "app": {"id": "agltb3B1Yi1pbmNyDAsSA0FwcBiJkfIUDA", "name": "Yahoo Weather", "cat": ["IAB15", "IAB15-10"], "ver": "1.0.2",
    "bundle": "12345", "storeurl": "https://itunes.apple.com/id628677149",
    "publisher": {"id": "agltb3B1Yi1pbmNyDAsSA0FwcBiJkfTUCV", "name": "yahoo", "domain": "www.yahoo.com"}},
  "device": {"dnt": 0, "ua": "Mozilla/5.0 (iPhone; CPU iPhone OS 6_1 like Mac OS X) AppleWebKit/534.46 (KHTML, like Gecko) Version/5.1 Mobile/9A334 Safari/7534.48.3",
    "ifa": "AA000DFE74168477C70D291f574D344790E0BB11", "carrier": "VERIZON", "language": "en", "make": "Apple", "model": "iPhone",
    "os": "iOS", "osv": "6.1", "js": 1, "connectiontype": 3, "devicetype": 1},
  "user": {"id": "ffffffd5135596709273b3a1a07e466ea2bf4fff"}
}`

// rtbApp and rtbSite name the scenario's apps and sites; app 0 is 12345,
// example 6.2.3's.
func rtbApp(i int) string {
	if i == 0 {
		return "12345"
	}
	return fmt.Sprintf("com.example.app%03d", i)
}
func rtbSite(i int) string { return fmt.Sprintf("site%03d.example", i) }

// rtbSet is the scenario's account: 1,000 line items of 100 advertisers
// (one of them apple.com, which 6.2.3 blocks), each for a few apps or
// sites, banners of three sizes with IAB categories (some that 6.2.3
// blocks), CPMs of 0.10 to 3.00 (some under its floor) and priorities 1 to
// 8: about twenty line items target app 12345, a handful of which fit.
func rtbSet() *tsubame.CampaignSet {
	r := rand.New(rand.NewPCG(2026, 32))
	set := &tsubame.CampaignSet{Currency: "USD"}
	cats := []string{"IAB1", "IAB2-3", "IAB3", "IAB7-39", "IAB8", "IAB8-5", "IAB9", "IAB12", "IAB15-10", "IAB19", "IAB20", "IAB25"}
	for a := range rtbAdvertisers {
		id := fmt.Sprintf("adv%03d", a)
		domain := id + ".example"
		if a == 7 {
			domain = "apple.com"
		}
		addBannerAdvertiser(set, r, id, domain, cats)
		set.Campaigns = append(set.Campaigns, &tsubame.Campaign{ID: "camp-" + id, Advertiser: id, Timezone: "UTC"})
	}
	for i := range rtbLineItems {
		a := r.IntN(rtbAdvertisers)
		adv := fmt.Sprintf("adv%03d", a)
		li := &tsubame.LineItem{ID: fmt.Sprintf("li-%04d", i), Campaign: "camp-" + adv, Priority: 1 + r.IntN(8), Weight: 1 + r.IntN(10),
			CPM:       tsubame.Money(100_000 + 10_000*r.Int64N(291)), // 0.10 to 3.00
			Creatives: []string{fmt.Sprintf("cr-%s-%d", adv, r.IntN(3))}}
		if r.IntN(2) == 0 {
			for range 1 + r.IntN(3) {
				app := rtbApp(r.IntN(rtbApps))
				if r.IntN(10) == 0 {
					app = rtbApp(0) // about one in twenty line items is for 12345
				}
				if !contains(li.Targeting.Apps, app) {
					li.Targeting.Apps = append(li.Targeting.Apps, app)
				}
			}
		} else {
			for range 1 + r.IntN(3) {
				if s := rtbSite(r.IntN(rtbSites)); !contains(li.Targeting.Sites, s) {
					li.Targeting.Sites = append(li.Targeting.Sites, s)
				}
			}
		}
		set.LineItems = append(set.LineItems, li)
	}
	return set
}

// rtbSizes are the banner sizes of each advertiser's creatives.
var rtbSizes = [...][2]int{{728, 90}, {300, 250}, {320, 50}}

// addBannerAdvertiser adds an advertiser of domain and its approved
// banners, cr-<id>-0 to -2 of rtbSizes, each of a category drawn from cats.
func addBannerAdvertiser(set *tsubame.CampaignSet, r *rand.Rand, id, domain string, cats []string) {
	set.Advertisers = append(set.Advertisers, &tsubame.Advertiser{ID: id, Name: "Advertiser " + id, Domains: []string{domain}})
	for c, sz := range rtbSizes {
		set.Creatives = append(set.Creatives, &tsubame.Creative{ID: fmt.Sprintf("cr-%s-%d", id, c), Advertiser: id,
			Format: tsubame.FormatBanner, W: sz[0], H: sz[1], Image: fmt.Sprintf("https://cdn.%s/%dx%d.png", domain, sz[0], sz[1]),
			Click: "https://" + domain + "/landing", Categories: []string{cats[r.IntN(len(cats))]}, Status: tsubame.StatusApproved})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// rtbToken is the bench exchange's token, sent by wrk to both bidders.
const rtbToken = "bench-exchange-token-0123456789"

// rtbConfig is the configuration of the scenario's Tsubame: one exchange,
// the set's currency.
func rtbConfig() string {
	return rtbAccountConfig("ltsv") + "      reservation: 10m\n" // the default log format
}

// rtbScript is wrk's script: example 6.2.3 posted with the token.
func rtbScript() string {
	return "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n" +
		"wrk.headers[\"X-Exchange-Token\"] = \"" + rtbToken + "\"\nwrk.body = [=[" + rtbExample + "]=]\n"
}

// writeRTBFiles writes the campaign file, Tsubame's configuration and
// wrk's script of the scenario into dir.
func writeRTBFiles(dir string) (campaigns, config, script string, err error) {
	campaigns, config, script = filepath.Join(dir, "rtb-campaigns.json"), filepath.Join(dir, "rtb.yaml"), filepath.Join(dir, "rtb.lua")
	b, err := json.Marshal(rtbSet())
	if err != nil {
		return "", "", "", err
	}
	for _, f := range []struct {
		path string
		body []byte
	}{{campaigns, b}, {config, []byte(rtbConfig())}, {script, []byte(rtbScript())}} {
		if err := os.WriteFile(f.path, f.body, 0o600); err != nil {
			return "", "", "", err
		}
	}
	return campaigns, config, script, nil
}

// luaBidderConf is the nginx + Lua bidder: lua-cjson decodes the request
// and encodes the response; init_by_lua indexes the campaign file's line
// items by app and site (sorted by priority, each with its advertiser's
// domains and its creatives' sizes and categories, top-level ones too);
// each impression takes the candidates of its app or site (the site's
// domain and its suffixes), keeps those whose advertiser is not blocked,
// whose CPM clears the floor and with a creative of an offered size and no
// blocked category, draws by weight within the first priority, and bids
// with nurl, burl, lurl and the markup's click URL each signed for its
// kind with HMAC-SHA1 (what the module has built in; a token for one
// kind must not do for another, or the click URL every browser sees
// would bill), and a line in a buffered access log. A malformed request is
// a 400, no bid a 204.
const luaBidderConf = `load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
` + nginxTop + `http {
  lua_package_cpath "/usr/lib/x86_64-linux-gnu/lua/5.1/?.so;;";
  log_format rtb '$time_iso8601 $request_id $status $bid_line';
  access_log %[2]s/rtb-lua.log rtb buffer=64k flush=100ms;
  init_by_lua_block {
    cjson = require "cjson"
    local f = assert(io.open("%[4]s"))
    local set = cjson.decode(f:read("*a"))
    f:close()
    local domains, creatives = {}, {}
    for _, a in ipairs(set.advertisers) do domains[a.id] = a.domains or {} end
    local advOf = {}
    for _, c in ipairs(set.campaigns) do advOf[c.id] = c.advertiser end
    for _, c in ipairs(set.creatives) do
      local blocks = {}
      for _, cat in ipairs(c.categories or {}) do
        blocks[cat] = true
        local top = cat:match("^(IAB%%d+)%%-")
        if top then blocks[top] = true end
      end
      creatives[c.id] = {id = c.id, size = c.w .. "x" .. c.h, w = c.w, h = c.h, cats = c.categories or {},
        blocks = blocks, image = c.image, click = c.click}
    end
    byApp, bySite = {}, {}
    local function file(index, key, li)
      local l = index[key] or {}
      l[#l + 1] = li
      index[key] = l
    end
    for _, li in ipairs(set.line_items) do
      local adv = advOf[li.campaign]
      local line = {id = li.id, campaign = li.campaign, priority = li.priority, weight = li.weight,
        cpm = tonumber(li.cpm), domains = domains[adv], creatives = {}}
      for _, id in ipairs(li.creatives) do line.creatives[#line.creatives + 1] = creatives[id] end
      local t = li.targeting or {}
      for _, app in ipairs(t.apps or {}) do file(byApp, app, line) end
      for _, site in ipairs(t.sites or {}) do file(bySite, site, line) end
    end
    local byPriority = function(a, b) return a.priority < b.priority end
    for _, l in pairs(byApp) do table.sort(l, byPriority) end
    for _, l in pairs(bySite) do table.sort(l, byPriority) end
    secret = "bench-secret-of-the-lua-bidder-0123456789"
    math.randomseed(ngx.now() * 1000)
  }
` + nginxServer + `    location /rtb/ {
      set $bid_line "-";
      content_by_lua_block {
        if ngx.req.get_headers()["X-Exchange-Token"] ~= "` + rtbToken + `" then return ngx.exit(401) end
        ngx.req.read_body()
        local ok, req = pcall(cjson.decode, ngx.req.get_body_data() or "")
        if not ok or type(req) ~= "table" or type(req.id) ~= "string" or req.id == "" or type(req.imp) ~= "table" or #req.imp == 0 then
          return ngx.exit(400)
        end
        local seen = {}
        for _, imp in ipairs(req.imp) do
          if type(imp.id) ~= "string" or imp.id == "" or seen[imp.id] then return ngx.exit(400) end
          seen[imp.id] = true
        end
        local bcat, badv = {}, {}
        for _, c in ipairs(req.bcat or {}) do bcat[c] = true end
        for _, d in ipairs(req.badv or {}) do badv[d] = true end
        local cands = {}
        if type(req.app) == "table" and req.app.bundle then
          cands = byApp[req.app.bundle] or {}
        elseif type(req.site) == "table" and type(req.site.domain) == "string" then
          local d = req.site.domain:lower()
          while d do
            for _, l in ipairs(bySite[d] or {}) do cands[#cands + 1] = l end
            d = d:match("^[^.]+%%.(.+)$")
          end
        end
        local bids = {}
        for _, imp in ipairs(req.imp) do
          local b = imp.banner
          local floor = tonumber(imp.bidfloor) or 0
          local private = type(imp.pmp) == "table" and imp.pmp.private_auction == 1
          if type(b) == "table" and not private then
            local sizes = {}
            if type(b.format) == "table" and #b.format > 0 then
              for _, f in ipairs(b.format) do sizes[tostring(f.w) .. "x" .. tostring(f.h)] = true end
            else
              sizes[tostring(b.w) .. "x" .. tostring(b.h)] = true
            end
            local best, eligible, total = nil, {}, 0
            for _, l in ipairs(cands) do
              if best and l.priority > best then break end
              local blocked = false
              for _, d in ipairs(l.domains) do if badv[d] then blocked = true end end
              if not blocked and l.cpm >= floor then
                for _, c in ipairs(l.creatives) do
                  local catBlocked = false
                  for cat in pairs(c.blocks) do if bcat[cat] then catBlocked = true end end
                  if sizes[c.size] and not catBlocked then
                    best = l.priority
                    eligible[#eligible + 1] = {l, c}
                    total = total + l.weight
                    break
                  end
                end
              end
            end
            if total > 0 then
              local r, pick = math.random() * total, eligible[#eligible]
              for _, e in ipairs(eligible) do
                r = r - e[1].weight
                if r <= 0 then pick = e break end
              end
              local l, c = pick[1], pick[2]
              local id = string.format("%%08x%%08x", math.random(0, 0x7fffffff), math.random(0, 0x7fffffff))
              local price = l.cpm
              local payload = table.concat({id, l.id, l.campaign, c.id, req.id, imp.id, string.format("%%.6f", price)}, "|")
              local function token(kind)
                local p = payload .. "|" .. kind
                return ngx.escape_uri(ngx.encode_base64(p) .. "." .. ngx.encode_base64(ngx.hmac_sha1(secret, p)))
              end
              local base = "http://bidder.example"
              bids[#bids + 1] = {id = id, impid = imp.id, price = price, adid = c.id, crid = c.id, cid = l.campaign,
                adomain = l.domains, cat = c.cats, w = c.w, h = c.h, mtype = 1,
                nurl = base .. "/t/win/" .. token("win") .. "?price=${AUCTION_PRICE}",
                burl = base .. "/t/bill/" .. token("bill") .. "?price=${AUCTION_PRICE}",
                lurl = base .. "/t/loss/" .. token("loss") .. "?price=${AUCTION_PRICE}&loss=${AUCTION_LOSS}",
                adm = '<a href="' .. base .. '/t/c/' .. token("click") .. '" target="_blank" rel="noopener"><img src="' .. c.image ..
                  '" width="' .. c.w .. '" height="' .. c.h .. '" alt="" style="border:0"></a>'}
              ngx.var.bid_line = "bid:" .. id .. " " .. l.id .. " " .. string.format("%%.6f", price)
            end
          end
        end
        if #bids == 0 then return ngx.exit(204) end
        ngx.header["Content-Type"] = "application/json"
        ngx.header["X-Openrtb-Version"] = "2.6"
        ngx.print(cjson.encode({id = req.id, bidid = bids[1].id, cur = "USD", seatbid = {{seat = "bench-seat", bid = bids}}}))
      }
    }
  }
}
`

// startLuaBidder runs the nginx + Lua bidder (luaBidderConf) on addr, its
// line items read from campaigns.
func startLuaBidder(ctx context.Context, p *procs, dir, addr, campaigns string, workers int) error {
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/lua/5.1/cjson.so"); err != nil {
		return fmt.Errorf("the nginx + Lua bidder needs lua-cjson (Debian's lua-cjson): %w", err)
	}
	_, err := runNginx(ctx, p, dir, addr, fmt.Appendf(nil, luaBidderConf, workers, dir, addr, campaigns))
	return err
}

// checkRTB posts the scenario's request to a bidder and checks it bids.
func checkRTB(addr string) error {
	body, err := httpPost("http://"+addr+"/rtb/bench", rtbExample, "X-Exchange-Token", rtbToken)
	if err != nil {
		return err
	}
	var r struct {
		SeatBid []struct {
			Bid []struct {
				Price json.Number `json:"price"`
			} `json:"bid"`
		} `json:"seatbid"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.SeatBid) != 1 || len(r.SeatBid[0].Bid) != 1 {
		return fmt.Errorf("%s does not bid on example 6.2.3: %v %.300s", addr, err, body)
	}
	if p, err := strconv.ParseFloat(string(r.SeatBid[0].Bid[0].Price), 64); err != nil || p < 0.5 {
		return fmt.Errorf("%s bids %s on example 6.2.3, under its floor", addr, r.SeatBid[0].Bid[0].Price)
	}
	return nil
}

// waitRTB waits until each bidder bids on the scenario's request: Tsubame
// loads its campaigns from its store after it starts listening.
func waitRTB(ctx context.Context, addrs ...string) error {
	for _, a := range addrs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := checkRTB(a)
			if err == nil {
				break
			}
			if ctx.Err() != nil || time.Now().After(deadline) {
				return errors.Join(err, ctx.Err())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// rtbCount is what one bidder answered during one run: requests, and
// bids among them (the rest were 204s, cheaper to answer).
type rtbCount struct {
	Who            string
	Requests, Bids int64
}

// scrapeRTB reads the bench exchange's requests and bids from Tsubame's
// /metrics.
func scrapeRTB(admin string) (rtbCount, error) {
	body, err := httpGet("http://" + admin + "/metrics")
	if err != nil {
		return rtbCount{}, err
	}
	c := rtbCount{Who: "tsubame"}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, _ := strconv.ParseFloat(val, 64)
		switch name {
		case `tsubame_rtb_requests_total{exchange="bench"}`:
			c.Requests = int64(v)
		case `tsubame_rtb_bids_total{exchange="bench"}`:
			c.Bids = int64(v)
		}
	}
	return c, sc.Err()
}

// countLuaBids counts the nginx + Lua bidder's answers to /rtb/ in its
// access log (written through a 64 KiB buffer flushed every 100 ms: it is
// read after the buffer's flush), from offset on; it returns the new
// offset.
func countLuaBids(log string, offset int64) (rtbCount, int64, error) {
	return countLuaLines(log, offset, func(line string) (answered, bid bool) {
		// $time_iso8601 $request_id $status $bid_line ("bid:<id> <line
		// item> <price>", or "-")
		f := strings.Fields(line)
		if len(f) < 4 || f[2] != "200" && f[2] != "204" || f[3] == "-" && f[2] == "200" {
			return false, false
		}
		return true, strings.HasPrefix(f[3], "bid:")
	})
}

// countLuaLines counts the nginx + Lua bidder's answers and bids in its
// access log from offset on, as read reads each whole line, and returns
// the new offset: a partial last line is read next time.
func countLuaLines(log string, offset int64, read func(line string) (answered, bid bool)) (rtbCount, int64, error) {
	f, err := os.Open(log)
	if err != nil {
		return rtbCount{}, offset, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return rtbCount{}, offset, err
	}
	c := rtbCount{Who: "nginx-lua"}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		offset += int64(len(line))
		if answered, bid := read(line); answered {
			c.Requests++
			if bid {
				c.Bids++
			}
		}
	}
	return c, offset, nil
}
