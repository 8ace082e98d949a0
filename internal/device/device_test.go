package device_test

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"tsubame"
	"tsubame/internal/device"
)

// Real User-Agents, as browsers and crawlers sent them.
var cases = []struct {
	name, ua string
	want     device.Info
}{
	{"Chrome, Windows", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
		device.Info{Device: "desktop", OS: "windows", Browser: "chrome"}},
	{"Safari, iPhone", "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
		device.Info{Device: "mobile", OS: "ios", Browser: "safari"}},
	{"Safari, iPad", "Mozilla/5.0 (iPad; CPU OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
		device.Info{Device: "tablet", OS: "ios", Browser: "safari"}},
	{"Chrome, iPhone", "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/131.0.6778.73 Mobile/15E148 Safari/604.1",
		device.Info{Device: "mobile", OS: "ios", Browser: "chrome"}},
	{"Safari, Mac", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
		device.Info{Device: "desktop", OS: "macos", Browser: "safari"}},
	{"Chrome, Android phone", "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36",
		device.Info{Device: "mobile", OS: "android", Browser: "chrome"}},
	{"Chrome, Android tablet", "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
		device.Info{Device: "tablet", OS: "android", Browser: "chrome"}},
	{"Chrome, Galaxy Tab", "Mozilla/5.0 (Linux; Android 14; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
		device.Info{Device: "tablet", OS: "android", Browser: "chrome"}},
	{"Firefox, Android tablet", "Mozilla/5.0 (Android 14; Tablet; rv:133.0) Gecko/133.0 Firefox/133.0",
		device.Info{Device: "tablet", OS: "android", Browser: "firefox"}},
	{"Firefox, Android phone", "Mozilla/5.0 (Android 14; Mobile; rv:133.0) Gecko/133.0 Firefox/133.0",
		device.Info{Device: "mobile", OS: "android", Browser: "firefox"}},
	{"Firefox, Linux", "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
		device.Info{Device: "desktop", OS: "linux", Browser: "firefox"}},
	{"Firefox, Ubuntu", "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
		device.Info{Device: "desktop", OS: "linux", Browser: "firefox"}},
	{"Edge, Windows", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0",
		device.Info{Device: "desktop", OS: "windows", Browser: "edge"}},
	{"Opera, Windows", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 OPR/115.0.0.0",
		device.Info{Device: "desktop", OS: "windows", Browser: "opera"}},
	{"IE 11", "Mozilla/5.0 (Windows NT 10.0; WOW64; Trident/7.0; rv:11.0) like Gecko",
		device.Info{Device: "desktop", OS: "windows", Browser: "ie"}},
	{"Chrome, ChromeOS", "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
		device.Info{Device: "desktop", OS: "chromeos", Browser: "chrome"}},
	{"Samsung Internet", "Mozilla/5.0 (Linux; Android 14; SAMSUNG SM-S921B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/27.0 Chrome/125.0.0.0 Mobile Safari/537.36",
		device.Info{Device: "mobile", OS: "android", Browser: "samsung"}},
	{"phone with 'bot' in its model", "Mozilla/5.0 (Linux; Android 13; CUBOT X30) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36",
		device.Info{Device: "mobile", OS: "android", Browser: "chrome"}},
	{"Samsung smart TV", "Mozilla/5.0 (SMART-TV; Linux; Tizen 6.0) AppleWebKit/537.36 (KHTML, like Gecko) 76.0.3809.146/6.0 TV Safari/537.36",
		device.Info{Device: "tv", OS: "linux"}},
	{"LG webOS TV", "Mozilla/5.0 (Web0S; Linux/SmartTV) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/87.0.4280.88 Safari/537.36 WebAppManager",
		device.Info{Device: "tv"}},
	{"Fire TV", "Mozilla/5.0 (Linux; Android 9; AFTMM Build/PS7233; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/118.0.5993.144 Mobile Safari/537.36",
		device.Info{Device: "tv", OS: "android", Browser: "chrome"}},
	{"Chromecast", "Mozilla/5.0 (X11; Linux aarch64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 CrKey/1.56.500000",
		device.Info{Device: "tv", OS: "linux", Browser: "chrome"}},
	{"PlayStation 5", "Mozilla/5.0 (PlayStation; PlayStation 5/2.26) AppleWebKit/605.1.15 (KHTML, like Gecko)",
		device.Info{Device: "tv"}},
	{"Samsung Internet, Galaxy Tab", "Mozilla/5.0 (Linux; Android 14; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/27.0 Chrome/125.0.0.0 Safari/537.36",
		device.Info{Device: "tablet", OS: "android", Browser: "samsung"}},
	{"Silk, Kindle Fire", "Mozilla/5.0 (Linux; Android 9; KFTRWI) AppleWebKit/537.36 (KHTML, like Gecko) Silk/131.3.4 like Chrome/131.0.6778.200 Safari/537.36",
		device.Info{Device: "tablet", OS: "android", Browser: "silk"}},
	{"Yandex Browser", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 YaBrowser/24.12.0.0 Safari/537.36",
		device.Info{Device: "desktop", OS: "windows", Browser: "yandex"}},
	{"Facebook in-app browser", "Mozilla/5.0 (Linux; Android 14; Pixel 8 Build/AP1A.240505.005; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/125.0.6422.165 Mobile Safari/537.36 [FB_IAB/FB4A;FBAV/466.0.0.50.109;]",
		device.Info{Device: "mobile", OS: "android", Browser: "chrome"}},
	{"Instagram in-app browser", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 Instagram 337.0.3.23.54 (iPhone15,2; iOS 17_5; en_US; en; scale=3.00; 1179x2556; 618188146)",
		device.Info{Device: "mobile", OS: "ios", Browser: "safari"}},
	{"Xbox", "Mozilla/5.0 (Windows NT 10.0; Win64; x64; Xbox; Xbox One) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edge/44.18363.8131",
		device.Info{Device: "tv", OS: "windows", Browser: "edge"}},
	{"app HTTP client", "Dalvik/2.1.0 (Linux; U; Android 11; SM-A515F Build/RP1A.200720.012)",
		device.Info{Device: "mobile", OS: "android", Browser: "androidbrowser"}},
	{"okhttp", "okhttp/4.12.0", device.Info{}},

	{"Googlebot", "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", device.Info{Bot: true}},
	{"Googlebot smartphone", "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.69 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
		device.Info{Bot: true}},
	{"bingbot", "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)", device.Info{Bot: true}},
	{"bingbot, Chrome", "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm) Chrome/131.0.0.0 Safari/537.36",
		device.Info{Bot: true}},
	{"AdsBot-Google", "AdsBot-Google (+http://www.google.com/adsbot.html)", device.Info{Bot: true}},
	{"Mediapartners-Google", "Mediapartners-Google", device.Info{Bot: true}},
	{"facebookexternalhit", "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)", device.Info{Bot: true}},
	{"Slackbot", "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)", device.Info{Bot: true}},
	{"Applebot", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/13.1.1 Safari/605.1.15 (Applebot/0.1; +http://www.apple.com/go/applebot)",
		device.Info{Bot: true}},
	{"GPTBot", "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; GPTBot/1.2; +https://openai.com/gptbot", device.Info{Bot: true}},
	// Missed by the library, caught by crawlerTokens.
	{"Scrapy", "Scrapy/2.11 (+https://scrapy.org)", device.Info{Bot: true}},
	{"axios", "axios/1.7.7", device.Info{Bot: true}},
	{"Lighthouse", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Chrome-Lighthouse", device.Info{Bot: true}},
	{"python-requests", "python-requests/2.32.3", device.Info{Bot: true}},
	{"curl", "curl/8.11.0", device.Info{Bot: true}},
	{"wget", "Wget/1.21.4", device.Info{Bot: true}},
	{"Go", "Go-http-client/1.1", device.Info{Bot: true}},
	{"headless Chrome", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36",
		device.Info{Bot: true}},
	{"empty", "", device.Info{Bot: true}},
	{"blank", "  \t", device.Info{Bot: true}},
}

func newParser(t testing.TB, opt device.Options) *device.Parser {
	t.Helper()
	p, err := device.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParse(t *testing.T) {
	p := newParser(t, device.Options{})
	for _, tc := range cases {
		for _, pass := range []string{"parsed", "cached"} {
			if got := p.Parse([]byte(tc.ua)); got != tc.want {
				t.Errorf("%s (%s): Parse(%q) = %+v, want %+v", tc.name, pass, tc.ua, got, tc.want)
			}
		}
	}
}

func TestNoUserAgent(t *testing.T) {
	p := newParser(t, device.Options{})
	for range 2 {
		if got := p.Parse(nil); got != (device.Info{Bot: true}) {
			t.Errorf("Parse(nil) = %+v, want a bot", got)
		}
	}
}

func TestHeadless(t *testing.T) {
	ua := []byte("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36")
	if got := newParser(t, device.Options{}).Parse(ua); !got.Bot {
		t.Errorf("by default HeadlessChrome is %+v, want a bot", got)
	}
	p := newParser(t, device.Options{HeadlessIsBrowser: true})
	want := device.Info{Device: "desktop", OS: "linux", Browser: "chrome"}
	if got := p.Parse(ua); got != want {
		t.Errorf("with HeadlessIsBrowser, HeadlessChrome is %+v, want %+v", got, want)
	}
	// Crawlers stay bots.
	if got := p.Parse([]byte("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)")); !got.Bot {
		t.Errorf("with HeadlessIsBrowser, Googlebot is %+v", got)
	}
}

func TestVocabulary(t *testing.T) {
	p := newParser(t, device.Options{})
	for _, tc := range cases {
		got := p.Parse([]byte(tc.ua))
		if got.Device != "" && !slices.Contains(tsubame.Devices, got.Device) {
			t.Errorf("%s: device %q is not in tsubame.Devices", tc.name, got.Device)
		}
		if got.OS != "" && !slices.Contains(device.OSes, got.OS) {
			t.Errorf("%s: OS %q is not in OSes", tc.name, got.OS)
		}
		if got.Browser != "" && !slices.Contains(device.Browsers, got.Browser) {
			t.Errorf("%s: browser %q is not in Browsers", tc.name, got.Browser)
		}
	}
	for _, list := range [][]string{device.OSes, device.Browsers} {
		for i, v := range list {
			if v != strings.ToLower(v) || strings.ContainsAny(v, " -_") || slices.Index(list, v) != i {
				t.Errorf("%q: values are lower-case words, each once", v)
			}
		}
	}
}

// Parse reads its argument only during the call: the server hands it a
// request buffer that the next request overwrites.
func TestParseDoesNotKeepBuffer(t *testing.T) {
	p := newParser(t, device.Options{})
	phone := cases[1] // Safari, iPhone
	buf := []byte(phone.ua)
	if got := p.Parse(buf); got != phone.want {
		t.Fatalf("Parse = %+v", got)
	}
	copy(buf, strings.Repeat("x", len(buf))) // the next request's bytes
	if got := p.Parse([]byte(phone.ua)); got != phone.want {
		t.Errorf("after the buffer was reused, Parse = %+v, want %+v", got, phone.want)
	}
}

func TestLongUserAgent(t *testing.T) {
	p := newParser(t, device.Options{})
	ua := cases[0].ua + " " + strings.Repeat("Extension/1.0 ", 200)
	for range 2 {
		if got := p.Parse([]byte(ua)); got != cases[0].want {
			t.Errorf("Parse(long) = %+v, want %+v", got, cases[0].want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	_, err := device.New(device.Options{CacheSize: -1})
	if code := tsubame.ErrorCode(err); code != tsubame.EINVALID {
		t.Errorf("New(CacheSize: -1) = %v (code %q), want %q", err, code, tsubame.EINVALID)
	}
}

func TestConcurrentParse(t *testing.T) {
	p := newParser(t, device.Options{CacheSize: 8}) // smaller than the cases: hits, misses and evictions
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			buf := make([]byte, 0, 512)
			for i := range 500 {
				tc := cases[(g*7+i)%len(cases)]
				buf = append(buf[:0], tc.ua...)
				if got := p.Parse(buf); got != tc.want {
					t.Errorf("%s: Parse = %+v, want %+v", tc.name, got, tc.want)
					return
				}
			}
		})
	}
	wg.Wait()
}
