package device

import (
	"strings"
	"unsafe"

	"github.com/maypok86/otter/v2"
	"github.com/maypok86/otter/v2/stats"
	"github.com/medama-io/go-useragent"
	"github.com/medama-io/go-useragent/agents"

	"tsubame"
)

// Info is what a User-Agent tells about the visitor. Device is one of
// tsubame.Devices, OS one of OSes, Browser one of Browsers; each is empty
// when the User-Agent does not say. Bot is true for crawlers, HTTP
// libraries and an empty User-Agent, and then the other fields are empty.
type Info struct {
	Device, OS, Browser string
	Bot                 bool
}

// OSes are the values of Info.OS, as targeting writes them. An iPad is "ios"
// with Device "tablet": iPadOS sends either an iOS User-Agent naming the
// iPad or, by default, a macOS one, so an "ipados" value would be half true.
var OSes = []string{"windows", "macos", "ios", "android", "linux", "chromeos", "freebsd", "openbsd"}

// Browsers are the values of Info.Browser, as targeting writes them: the
// browser's name in lower case, without spaces, vendor or the word
// "browser" ("Samsung Browser" is "samsung", "Amazon Silk" is "silk"),
// except Android's stock browser, "androidbrowser", which "android" would
// confuse with the OS.
var Browsers = []string{"chrome", "safari", "firefox", "edge", "opera", "operamini", "samsung", "ie",
	"vivaldi", "yandex", "silk", "huawei", "falkon", "nintendo", "androidbrowser"}

// DefaultCacheSize is the number of User-Agents a Parser remembers when
// Options.CacheSize is 0. An entry takes a few hundred bytes: the default
// cache, full, about 4 MB.
const DefaultCacheSize = 10_000

// maxCachedLen bounds the User-Agents kept in the cache, so that its memory
// is bounded by CacheSize: a browser's is a few hundred bytes; a longer one
// is parsed on each request.
const maxCachedLen = 1024

// Options configure a Parser.
type Options struct {
	// CacheSize is the number of User-Agents whose Info is kept (0:
	// DefaultCacheSize).
	CacheSize int
	// HeadlessIsBrowser counts HeadlessChrome as the Chrome it is rather
	// than as a bot: for end-to-end tests that drive headless Chromium.
	HeadlessIsBrowser bool
}

// Parser turns User-Agent headers into Info. It is safe for concurrent use.
type Parser struct {
	ua                *useragent.Parser
	cache             *otter.Cache[string, Info]
	headlessIsBrowser bool
}

// Load builds the User-Agent definitions every Parser shares: once in a
// process, tens of milliseconds of CPU, which the first New spends
// otherwise. A restart's successor calls it before it tells its
// predecessor it is ready, so that the build is not part of the time in
// which neither process accepts.
func Load() { useragent.NewParser() }

// New returns a Parser. It fails with tsubame.EINVALID for a negative
// CacheSize.
func New(opt Options) (*Parser, error) {
	if opt.CacheSize < 0 {
		return nil, tsubame.Errorf(tsubame.EINVALID, "user-agent cache size %d is negative", opt.CacheSize)
	}
	if opt.CacheSize == 0 {
		opt.CacheSize = DefaultCacheSize
	}
	cache, err := otter.New(&otter.Options[string, Info]{
		MaximumSize:   opt.CacheSize,
		StatsRecorder: stats.NewCounter(), // striped: hits are counted on the hot path
	})
	if err != nil {
		return nil, tsubame.WrapError(tsubame.EINVALID, err, "user-agent cache: %v", err)
	}
	return &Parser{ua: useragent.NewParser(), cache: cache, headlessIsBrowser: opt.HeadlessIsBrowser}, nil
}

// Parse returns the Info of the User-Agent ua. It reads ua only during the
// call (ua may be a request buffer that is reused); a User-Agent seen
// before costs one cache read and no allocation.
func (p *Parser) Parse(ua []byte) Info {
	if len(ua) <= maxCachedLen {
		// The unsafe string lives only for this probe: GetIfPresent
		// does not keep its key.
		if info, ok := p.cache.GetIfPresent(unsafe.String(unsafe.SliceData(ua), len(ua))); ok {
			return info
		}
	}
	s := string(ua)
	info := p.parse(s)
	if len(s) <= maxCachedLen {
		p.cache.SetIfAbsent(s, info)
	}
	return info
}

// Stats is a snapshot of a Parser's cache counters: a high miss ratio
// under steady traffic says Options.CacheSize is too small.
type Stats struct {
	Hits      uint64 // User-Agents found in the cache
	Misses    uint64 // User-Agents parsed (those longer than 1 KiB not counted)
	Evictions uint64 // entries dropped to stay within CacheSize
	Entries   int    // User-Agents in the cache now (an estimate)
}

// Stats returns a snapshot of the cache's counters.
func (p *Parser) Stats() Stats {
	s := p.cache.Stats()
	return Stats{Hits: s.Hits, Misses: s.Misses, Evictions: s.Evictions, Entries: p.cache.EstimatedSize()}
}

func (p *Parser) parse(s string) Info {
	if strings.TrimSpace(s) == "" {
		return Info{Bot: true} // every browser sends one
	}
	headless := strings.Contains(s, "Headless")
	if headless && p.headlessIsBrowser {
		// The library calls it a bot; read it as the Chrome it is.
		s = strings.ReplaceAll(s, "HeadlessChrome", "Chrome")
	}
	ua := p.ua.Parse(s)
	if ua.IsBot() || crawlerTokens.in(s) || (headless && !p.headlessIsBrowser) {
		// What a crawler claims to run on is no visitor's device.
		return Info{Bot: true}
	}
	info := Info{OS: osName(ua.OS()), Browser: browserName(ua.Browser())}
	switch ua.Device() {
	case agents.DeviceDesktop:
		info.Device = "desktop"
	case agents.DeviceMobile:
		info.Device = "mobile"
	case agents.DeviceTablet:
		info.Device = "tablet"
	case agents.DeviceTV:
		info.Device = "tv"
	}
	// The library reads every Android browser as a phone; a tablet's
	// browser leaves "Mobile" out (Chrome, Samsung Internet, Silk) or says
	// "Tablet" (Firefox, which the library reads). App HTTP clients
	// (Dalvik) say neither, and stay phones.
	if info.OS == "android" && info.Device == "mobile" && !strings.Contains(s, "Mobile") &&
		(strings.Contains(s, "AppleWebKit") || strings.Contains(s, "Gecko")) {
		info.Device = "tablet"
	}
	// Television tokens the library misses, mostly behind the Android
	// token whose device model it skips.
	if tvTokens.in(s) {
		info.Device = "tv"
	}
	return info
}

// tvTokens mark a television, a streaming stick or a game console.
var tvTokens = newTokens(
	"SMART-TV", "SmartTV", "Smart TV", "HbbTV", "Web0S", "webOS.TV", "NetCast", "BRAVIA", "CrKey", "Roku",
	"AppleTV", "Apple TV", "tvOS", "GoogleTV", "Google TV", "Android TV", "AndroidTV", "; AFT",
	"Nexus Player", "PlayStation", "Xbox",
)

// crawlerTokens mark a bot the library missed. Crawlers that follow the
// convention link to a page about them ("+http"); the others are named,
// with the HTTP libraries scripts use. Libraries apps use to fetch ads
// (okhttp, Dalvik, CFNetwork) are not here: their requests come from people.
var crawlerTokens = newTokens(
	"+http", "bot/", "crawler", "spider", "slurp",
	"Googlebot", "AdsBot-Google", "Mediapartners-Google", "APIs-Google", "FeedFetcher-Google",
	"Google-InspectionTool", "GoogleOther", "Storebot-Google", "Google-Read-Aloud",
	"bingbot", "BingPreview", "adidxbot", "msnbot", "Applebot", "YandexBot", "DuckDuckBot", "PetalBot",
	"facebookexternalhit", "facebookcatalog", "meta-externalagent", "Slackbot", "Twitterbot",
	"LinkedInBot", "Discordbot", "TelegramBot", "WhatsApp/", "Pinterestbot", "Bytespider",
	"GPTBot", "ClaudeBot", "CCBot", "Amazonbot", "AhrefsBot", "SemrushBot", "MJ12bot",
	"Chrome-Lighthouse", "PhantomJS", "python-requests", "Python-urllib", "python-httpx", "aiohttp",
	"curl/", "Wget/", "Go-http-client", "libwww-perl", "Apache-HttpClient", "Java/", "node-fetch",
	"axios/", "undici", "Scrapy",
)

// tokens is a set of ASCII tokens found in a string ignoring case, in one
// pass without allocating: the candidates at each byte are the tokens that
// start with it. (Sixty strings.Contains calls on a lower-cased copy took
// three times as long.)
type tokens [256][]string

func newTokens(list ...string) *tokens {
	t := new(tokens)
	for _, s := range list {
		s = strings.ToLower(s)
		c := s[0]
		t[c] = append(t[c], s)
		if 'a' <= c && c <= 'z' {
			t[c-'a'+'A'] = append(t[c-'a'+'A'], s)
		}
	}
	return t
}

// in reports whether s holds one of the tokens.
func (t *tokens) in(s string) bool {
	for i := 0; i < len(s); i++ {
	candidates:
		for _, tok := range t[s[i]] {
			if len(s)-i < len(tok) {
				continue
			}
			for j := 1; j < len(tok); j++ {
				c := s[i+j]
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				if c != tok[j] {
					continue candidates
				}
			}
			return true
		}
	}
	return false
}

func osName(o agents.OS) string {
	switch o {
	case agents.OSWindows:
		return "windows"
	case agents.OSMacOS:
		return "macos"
	case agents.OSIOS:
		return "ios"
	case agents.OSAndroid:
		return "android"
	case agents.OSLinux:
		return "linux"
	case agents.OSChromeOS:
		return "chromeos"
	case agents.OSFreeBSD:
		return "freebsd"
	case agents.OSOpenBSD:
		return "openbsd"
	}
	return token(string(o))
}

func browserName(b agents.Browser) string {
	switch b {
	case agents.BrowserChrome:
		return "chrome"
	case agents.BrowserSafari:
		return "safari"
	case agents.BrowserFirefox:
		return "firefox"
	case agents.BrowserEdge:
		return "edge"
	case agents.BrowserOpera:
		return "opera"
	case agents.BrowserOperaMini:
		return "operamini"
	case agents.BrowserSamsung:
		return "samsung"
	case agents.BrowserIE:
		return "ie"
	case agents.BrowserVivaldi:
		return "vivaldi"
	case agents.BrowserYandex:
		return "yandex"
	case agents.BrowserSilk:
		return "silk"
	case agents.BrowserHuawei:
		return "huawei"
	case agents.BrowserFalkon:
		return "falkon"
	case agents.BrowserNintendo:
		return "nintendo"
	case agents.BrowserAndroid:
		return "androidbrowser"
	}
	return token(string(b))
}

// token names a value the tables above do not know yet (a later version of
// the library): lower case, without spaces.
func token(name string) string {
	return strings.ReplaceAll(strings.ToLower(name), " ", "")
}
