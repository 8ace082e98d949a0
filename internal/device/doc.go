// Package device reads the device type, operating system and browser from
// a User-Agent header, and tells crawlers apart, for targeting.
//
// Parsing is github.com/medama-io/go-useragent's (a trie of tokens built
// from real User-Agents, no regular expressions), mapped onto this
// project's vocabulary: tsubame.Devices, OSes and Browsers. Two of its
// readings are corrected: an Android browser that leaves out "Mobile" (or
// says "Tablet") is on a tablet, and television tokens it misses (a Fire
// TV's "AFT" model, BRAVIA, Chromecast's CrKey, webOS, HbbTV and others)
// make a "tv".
//
// A Parser keeps the Info of recent User-Agents in a bounded cache
// (otter), keyed by the header's bytes: a site's visitors send a few
// thousand distinct User-Agents, so most requests cost one cache read and
// no allocation; a parse takes a couple of microseconds (BenchmarkParse).
//
// Bot is set by the library's detection (its device "Bot": "bot",
// "Google", "curl", "Go-http-client", "python", "Java", "HeadlessChrome"
// and other tokens), by crawlerTokens (Googlebot, bingbot, AdsBot-Google,
// Mediapartners-Google, facebookexternalhit, Slackbot, GPTBot and others;
// any User-Agent linking to a page about itself, "+http…", as crawlers
// write them; the HTTP libraries of scripts: python-requests, curl, wget,
// Go-http-client, axios, Scrapy), and for an empty User-Agent: no browser
// sends none. HeadlessChrome is a bot unless Options.HeadlessIsBrowser is
// set, as end-to-end tests that drive headless Chromium set it. The HTTP
// libraries of mobile apps (okhttp, Dalvik, CFNetwork) are not bots: their
// requests come from people. A bot's Info carries nothing else.
//
// It imports the domain (for error kinds) only: never the listeners
// (server, admin), config, the store backends or cmd (arch_test.go).
package device
