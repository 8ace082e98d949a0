package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"

	"tsubame/internal/accesslog"
	"tsubame/internal/admin"
	"tsubame/internal/cache"
	"tsubame/internal/certs/certstest"
	"tsubame/internal/config"
	"tsubame/internal/server"
	"tsubame/internal/static"
	"tsubame/internal/webhook"
)

func load(t *testing.T, yamlText string, env ...string) *config.Config {
	t.Helper()
	path := ""
	if yamlText != "" {
		path = filepath.Join(t.TempDir(), "tsubame.yaml")
		if err := os.WriteFile(path, []byte(yamlText), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _, err := config.Load(path, env)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return cfg
}

func TestDefaults(t *testing.T) {
	cfg := load(t, "")
	if errs := cfg.Validate(); len(errs) != 0 {
		t.Fatalf("defaults do not validate: %v", errs)
	}
	if cfg.Listen != ":4000" || cfg.Admin.Listen != "127.0.0.1:4001" || cfg.DataDir != "./data" || cfg.Store.Type != "embedded" {
		t.Fatalf("defaults = %+v", cfg)
	}
	if cfg.Cache.MaxBytes != 100<<20 || cfg.Cache.TTL != time.Minute {
		t.Fatalf("cache defaults = %+v", cfg.Cache)
	}
	if cfg.AccessLog.Dir != "./logs" || cfg.AccessLog.RotateEvery != 5*time.Minute || cfg.AccessLog.FlushInterval != 100*time.Millisecond ||
		cfg.AccessLog.Format != "ltsv" || cfg.AccessLog.Durability != "process" {
		t.Fatalf("access log defaults = %+v", cfg.AccessLog)
	}
	if cfg.StorePath() != "./data/tsubame.db" {
		t.Fatalf("StorePath = %q", cfg.StorePath())
	}
	want := map[string]config.Endpoint{
		"sample1": {Source: "fixed", URLs: []string{"http://ad1.example.com/tag.js", "http://ad2.example.com/tag.js"}, Formats: []string{"js", "json"}},
		"sample2": {Source: "store", Cache: false, Formats: []string{"js", "json"}},
		"sample3": {Source: "store", Cache: true, Formats: []string{"js", "json"}},
		"sample4": {Source: "store", Cache: true, Formats: []string{"js", "json"}, AccessLog: "file"},
		"sample5": {Source: "store", Cache: true, Formats: []string{"js", "json"}, AccessLog: "store"},
	}
	if len(cfg.Endpoints) != len(want) {
		t.Fatalf("endpoints = %+v", cfg.Endpoints)
	}
	for name, w := range want {
		g := cfg.Endpoints[name]
		if w.AccessLog == "" {
			w.AccessLog = "none"
		}
		if g.Source != w.Source || g.Cache != w.Cache || g.AccessLog != w.AccessLog || !slices.Equal(g.URLs, w.URLs) || !slices.Equal(g.Formats, w.Formats) {
			t.Errorf("endpoint %s = %+v, want %+v", name, g, w)
		}
	}
}

func TestFileOverrides(t *testing.T) {
	cfg := load(t, `
listen: 127.0.0.1:9000
cache:
  ttl: 5s
  max_bytes: 2MiB
endpoints:
  banner:
    source: store
  tags:
    source: store
    formats: [js]
`)
	if cfg.Listen != "127.0.0.1:9000" || cfg.Cache.TTL != 5*time.Second || cfg.Cache.MaxBytes != 2<<20 {
		t.Fatalf("file values not applied: %+v", cfg)
	}
	if cfg.Cache.NegativeTTL != 10*time.Second {
		t.Fatalf("defaults for keys the file omits are lost: %v", cfg.Cache.NegativeTTL)
	}
	if _, ok := cfg.Endpoints["sample1"]; ok || len(cfg.Endpoints) != 2 {
		t.Fatalf("a file's endpoints must replace the defaults: %+v", cfg.Endpoints)
	}
	if !cfg.Endpoints["banner"].Cache {
		t.Fatal("a store endpoint must default to cache: true")
	}
	if !slices.Equal(cfg.Endpoints["tags"].Formats, []string{"js"}) {
		t.Fatalf("formats = %v", cfg.Endpoints["tags"].Formats)
	}
}

func TestEnvOverrides(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:9000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, warnings, err := config.Load(path, []string{
		"TSUBAME_LISTEN=127.0.0.1:7000",
		"TSUBAME_ADMIN_LISTEN=127.0.0.1:7001",
		"TSUBAME_DATA_DIR=/var/lib/tsubame",
		"TSUBAME_STORE=memory",
		"TSUBAME_CACHE_TTL=2s",
		"TSUBAME_CACHE_MAX_BYTES=64MiB",
		"TSUBAME_SERVER_HELLO_JSON=false",
		"TSUBAME_ACCESS_LOG_DIR=/var/log/tsubame",
		"TSUBAME_ACCESS_LOG_ROTATE_EVERY=1s",
		"TSUBAME_ACCESS_LOG_ON_CLOSE=/usr/local/bin/ship,--bucket,logs",
		"TSUBAME_ENDPOINTS_SAMPLE3_CACHE=false",
		"TSUBAME_ENDPOINTS_SAMPLE3_CACHE_CONTROL=no-store",
		"TSUBAME_ENDPOINTS_SAMPLE1_URLS=http://x.example.com/a.js,http://y.example.com/b.js",
		"TSUBAME_CONFIG=ignored-here",
		"TSUBAME_LISTN=typo",
		"PATH=/bin",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:7000" || cfg.Admin.Listen != "127.0.0.1:7001" || cfg.DataDir != "/var/lib/tsubame" ||
		cfg.Store.Type != "memory" || cfg.Cache.TTL != 2*time.Second || cfg.Cache.MaxBytes != 64<<20 || cfg.Server.HelloJSON {
		t.Fatalf("env not applied: %+v", cfg)
	}
	if cfg.AccessLog.Dir != "/var/log/tsubame" || cfg.AccessLog.RotateEvery != time.Second ||
		!slices.Equal(cfg.AccessLog.OnClose, []string{"/usr/local/bin/ship", "--bucket", "logs"}) {
		t.Fatalf("access log env not applied: %+v", cfg.AccessLog)
	}
	ep := cfg.Endpoints["sample3"]
	if ep.Cache || ep.CacheControl != "no-store" || ep.Source != "store" {
		t.Fatalf("endpoint env not applied over defaults: %+v", ep)
	}
	if got := cfg.Endpoints["sample1"].URLs; !slices.Equal(got, []string{"http://x.example.com/a.js", "http://y.example.com/b.js"}) {
		t.Fatalf("comma-separated list = %v", got)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "TSUBAME_LISTN") {
		t.Fatalf("warnings = %v, want one for TSUBAME_LISTN", warnings)
	}
	if errs := cfg.Validate(); len(errs) != 0 {
		t.Fatal(errs)
	}
}

func TestUnknownKeyIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("cache:\n  tll: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := config.Load(path, nil)
	if err == nil || !strings.Contains(err.Error(), "tll") {
		t.Fatalf("unknown key: err = %v", err)
	}
	if _, _, err := config.Load(filepath.Join(t.TempDir(), "none.yaml"), nil); err == nil {
		t.Fatal("missing file accepted")
	}
}

// Values of the wrong type, unknown keys and broken rules come in one
// report, each naming its key and the value given.
func TestEveryProblemAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	text := "cache:\n  ttl: 5x\n  max_bytes: lots\n  tll: 5s\nlisten: nope\nwebhook:\n  queue_size: x\naccess_log:\n  format: xml\nfoo: 1\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := config.LoadValid(path, []string{"TSUBAME_ADMIN_SESSION_IDLE=forever"})
	if err == nil {
		t.Fatal("accepted")
	}
	// (No second complaint about a value that did not decode: session_idle
	// is zero, not "forever".)
	// Each problem the file's keys make names its line; an unknown key the
	// one it was likely meant for.
	want := `invalid configuration (8 problem(s)):
  admin.session_idle: "forever" is not a duration (a number and a unit: 300ms, 5s, 2m, 1h)
  c.yaml:3: cache.max_bytes: invalid size "lots": want a whole number with an optional unit B, KiB, MiB, GiB, KB, MB or GB
  c.yaml:2: cache.ttl: "5x" is not a duration (a number and a unit: 300ms, 5s, 2m, 1h)
  c.yaml:4: cache.tll: unknown key; did you mean ttl?
  c.yaml:7: webhook.queue_size: "x" is not a valid int
  c.yaml:10: foo: unknown key
  c.yaml:5: listen: "nope" is not host:port
  c.yaml:9: access_log.format: "xml" is not one of ltsv, json`
	if err.Error() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", err, want)
	}
}

func TestValidateReportsEverything(t *testing.T) {
	cfg := load(t, `
listen: "nonsense"
admin: {listen: "nonsense2"}
log: {level: loud}
store: {type: cassandra}
cache: {ttl: -1s, max_bytes: 1KiB}
endpoints:
  "Bad Name": {source: store}
  fixed-bad: {source: fixed, urls: ["javascript:alert(1)"]}
  fixed-empty: {source: fixed}
  store-urls: {source: store, urls: ["http://a.example.com/"]}
  odd: {source: ldap, formats: [html], access_log: syslog}
access_log: {format: csv, rotate_every: 10ms, durability: maybe}
server: {extra_procs: -1}
`)
	errs := cfg.Validate()
	text := ""
	for _, e := range errs {
		text += e.Error() + "\n"
	}
	for _, want := range []string{"listen:", "admin.listen:", "log.level:", "store.type:", "cache.ttl:", "cache.max_bytes:",
		`"Bad Name"`, "endpoints.fixed-bad: urls:", "endpoints.fixed-empty: urls:", "endpoints.store-urls: urls:",
		"endpoints.odd: source:", "endpoints.odd: formats:", "endpoints.odd: access_log:",
		"access_log.format:", "access_log.rotate_every:", "access_log.durability:", "server.extra_procs:"} {
		if !strings.Contains(text, want) {
			t.Errorf("Validate does not report %q; got:\n%s", want, text)
		}
	}
}

// Every key has an environment variable (two keys mapping to one name would
// leave one without), and every variable's key is documented in defaults.yaml.
func TestEnvKeysCoverDefaults(t *testing.T) {
	k := koanf.New(".")
	for _, d := range append([][]byte{config.DefaultsYAML}, config.ModuleDefaults...) {
		if err := k.Load(rawbytes.Provider(d), yaml.Parser()); err != nil {
			t.Fatal(err)
		}
	}
	keys := config.EnvKeys()
	paths := map[string]string{}
	for env, path := range keys {
		if !k.Exists(path) {
			t.Errorf("%s sets %s, which defaults.yaml does not document", env, path)
		}
		paths[path] = env
	}
	for _, path := range k.Keys() {
		if strings.HasPrefix(path, "endpoints.") || path == "sites" || path == "templates" || path == "rtb.exchanges" || path == "rtb.rates" ||
			path == "ssp.demand" || path == "ssp.placements" || path == "ssp.publishers" {
			continue
		}
		if _, ok := paths[path]; !ok {
			t.Errorf("key %s has no environment variable", path)
		}
	}
	for _, must := range []string{"TSUBAME_LISTEN", "TSUBAME_ADMIN_LISTEN", "TSUBAME_DATA_DIR", "TSUBAME_STORE"} {
		if _, ok := keys[must]; !ok {
			t.Errorf("%s missing", must)
		}
	}
}

func TestByteSize(t *testing.T) {
	good := map[string]config.ByteSize{"512": 512, "512B": 512, "64KiB": 64 << 10, "100MiB": 100 << 20, "1GiB": 1 << 30,
		"10KB": 10000, "2MB": 2e6, "1GB": 1e9, " 3 MiB ": 3 << 20}
	for in, want := range good {
		var b config.ByteSize
		if err := b.UnmarshalText([]byte(in)); err != nil || b != want {
			t.Errorf("ByteSize(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5MiB", "10XB", "99999999999999999999GiB"} {
		var b config.ByteSize
		if err := b.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("ByteSize(%q) accepted as %d", in, b)
		}
	}
	if s := config.ByteSize(100 << 20).String(); s != "100MiB" {
		t.Errorf("String = %s", s)
	}
	if s := config.ByteSize(1000).String(); s != "1000B" {
		t.Errorf("String = %s", s)
	}
}

// docs/configuration.md documents every environment variable and carries the
// built-in defaults verbatim.
func TestDocsCoverConfig(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for env := range config.EnvKeys() {
		if !strings.Contains(string(doc), "`"+env+"`") {
			t.Errorf("docs/configuration.md does not document %s", env)
		}
	}
	if !strings.Contains(string(doc), string(config.DefaultsYAML)) {
		t.Error("docs/configuration.md does not carry internal/config/defaults.yaml verbatim")
	}
	for _, d := range config.ModuleDefaults {
		if !strings.Contains(string(doc), string(d)) {
			t.Errorf("docs/configuration.md does not carry a module's defaults verbatim:\n%s", d)
		}
	}
}

func TestSites(t *testing.T) {
	root := t.TempDir()
	cfg := load(t, `
endpoints:
  ads: {source: store}
sites:
  news:
    hosts: [News.Example.com, "*.news.example.com"]
    static_root: `+root+`
    endpoints:
      top: {source: store}
  shop:
    hosts: [shop.example.com]
unknown_hosts: reject
`, "TSUBAME_SITES_SHOP_HOSTS=shop.example.com,www.shop.example.com")
	if errs := cfg.Validate(); len(errs) != 0 {
		t.Fatal(errs)
	}
	news := cfg.Sites["news"]
	if news.Hosts[0] != "news.example.com" || !news.Endpoints["top"].Cache || news.StaticRoot != root {
		t.Fatalf("site = %+v", news)
	}
	if got := cfg.Sites["shop"].Hosts; len(got) != 2 || got[1] != "www.shop.example.com" {
		t.Fatalf("env hosts = %v", got)
	}
	bad := load(t, `
sites:
  a: {hosts: [x.example.com, "bad host"]}
  b: {hosts: [x.example.com], static_root: /nonexistent, endpoints: {e: {source: nowhere}}}
  c: {}
unknown_hosts: maybe
`)
	text := fmt.Sprint(bad.Validate())
	for _, want := range []string{`"bad host"`, "already a host of site a", "sites.b.static_root", "sites.b.endpoints.e: source", "sites.c.hosts", "unknown_hosts"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in %s", want, text)
		}
	}
}

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir)
	def := ca.Issue(t, dir, "default", "ads.example")
	news := ca.Issue(t, dir, "news", "news.example")
	good := load(t, `
tls: {listen: ":4443", cert: `+def.CertFile+`, key: `+def.KeyFile+`, min_version: "1.3"}
sites:
  news: {hosts: [news.example], tls_cert: `+news.CertFile+`}
`, "TSUBAME_SITES_NEWS_TLS_KEY="+news.KeyFile)
	if errs := good.Validate(); len(errs) != 0 {
		t.Fatal(errs)
	}
	if d, sites := good.TLSCertificates(); d.Cert != def.CertFile || len(sites) != 1 || sites[0].Pair.Key != news.KeyFile {
		t.Fatalf("TLSCertificates = %v %v", d, sites)
	}
	for name, c := range map[string]struct {
		yaml string
		want []string
	}{
		"no listener":    {`tls: {cert: ` + def.CertFile + `, key: ` + def.KeyFile + `}`, []string{"tls.listen: certificates are configured"}},
		"no certificate": {`tls: {listen: ":4443"}`, []string{"no certificate"}},
		"same port":      {`{listen: ":4443", tls: {listen: ":4443", cert: ` + def.CertFile + `, key: ` + def.KeyFile + `}}`, []string{"tls.listen: must differ from listen"}},
		"old version":    {`tls: {listen: ":4443", cert: ` + def.CertFile + `, key: ` + def.KeyFile + `, min_version: "1.0"}`, []string{"tls.min_version"}},
		"wrong key":      {`tls: {listen: ":4443", cert: ` + def.CertFile + `, key: ` + news.KeyFile + `}`, []string{"tls.cert/tls.key"}},
		"half a pair":    {`{tls: {listen: ":4443"}, sites: {news: {hosts: [news.example], tls_cert: ` + news.CertFile + `}}}`, []string{"sites.news.tls_cert/tls_key: give both"}},
		"missing file":   {`tls: {listen: ":4443", cert: /nonexistent.crt, key: ` + def.KeyFile + `}`, []string{"tls.cert/tls.key", "nonexistent.crt"}},
	} {
		text := fmt.Sprint(load(t, c.yaml).Validate())
		for _, want := range c.want {
			if !strings.Contains(text, want) {
				t.Errorf("%s: missing %q in %s", name, want, text)
			}
		}
	}
}

func TestTemplates(t *testing.T) {
	file := filepath.Join(t.TempDir(), "t.tmpl")
	if err := os.WriteFile(file, []byte("{{.Callback}}({{.URLsJSON}});"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := load(t, `
templates:
  inject: {text: "document.write({{.URLsJSON}});"}
  fromfile: {file: `+file+`}
endpoints:
  a: {source: store, template: inject}
sites:
  s:
    hosts: [s.example.com]
    templates:
      own: {text: "{{.ID}}"}
    endpoints:
      b: {source: store, template: own}
      c: {source: store, template: fromfile}
`)
	if errs := cfg.Validate(); len(errs) != 0 {
		t.Fatal(errs)
	}
	if got := cfg.TemplatesFor("s"); len(got) != 3 {
		t.Fatalf("site s sees %d templates", len(got))
	}
	bad := load(t, `
templates:
  broken: {text: "{{.Nope"}
  unknownfield: {text: "{{.Secret}}"}
  both: {text: "x", file: /etc/hostname}
  neither: {}
  missingfile: {file: /nonexistent/t.tmpl}
endpoints:
  a: {source: store, template: ghost}
`)
	text := fmt.Sprint(bad.Validate())
	for _, want := range []string{"templates.broken", "templates.unknownfield", "templates.both: give exactly one", "templates.neither", "templates.missingfile", `endpoints.a.template: no template named "ghost"`} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in %s", want, text)
		}
	}
}

func TestRedisFlushDelay(t *testing.T) {
	cfg := load(t, "store: {type: redis}\n")
	if cfg.Store.Redis.MaxFlushDelay != 200*time.Microsecond {
		t.Fatalf("default store.redis.max_flush_delay = %v, want 200us", cfg.Store.Redis.MaxFlushDelay)
	}
	if errs := cfg.Validate(); len(errs) != 0 {
		t.Fatal(errs)
	}
	for in, ok := range map[string]bool{"0s": true, "10ms": true, "11ms": false, "-1us": false} {
		cfg := load(t, "store: {type: redis, redis: {max_flush_delay: "+in+"}}\n")
		errs := fmt.Sprint(cfg.Validate())
		if got := !strings.Contains(errs, "store.redis.max_flush_delay"); got != ok {
			t.Errorf("max_flush_delay %s: accepted %v, want %v (%s)", in, got, ok, errs)
		}
	}
}

// store.redis.wait_replicas is auto by default, and takes off or a number.
func TestRedisWaitReplicas(t *testing.T) {
	cfg := load(t, "store: {type: redis}\n")
	if n, err := cfg.Store.Redis.WaitCount(); err != nil || n != 0 || cfg.Store.Redis.WaitTimeout != 500*time.Millisecond {
		t.Fatalf("default wait_replicas %q (%d, %v), wait_timeout %v; want auto and 500ms", cfg.Store.Redis.WaitReplicas, n, err, cfg.Store.Redis.WaitTimeout)
	}
	for in, want := range map[string]int{"auto": 0, "off": -1, "1": 1, "2": 2, "0": -2, "-1": -2, "yes": -2, "17": -2} {
		cfg := load(t, "store: {type: redis, redis: {wait_replicas: \""+in+"\"}}\n")
		errs := fmt.Sprint(cfg.Validate())
		n, err := cfg.Store.Redis.WaitCount()
		if want == -2 {
			if err == nil || !strings.Contains(errs, "store.redis.wait_replicas") {
				t.Errorf("wait_replicas %s accepted (%d; %s)", in, n, errs)
			}
			continue
		}
		if err != nil || n != want || strings.Contains(errs, "wait_replicas") {
			t.Errorf("wait_replicas %s = %d, %v (%s); want %d", in, n, err, errs, want)
		}
	}
	for in, ok := range map[string]bool{"1ms": true, "10s": true, "0s": false, "11s": false} {
		cfg := load(t, "store: {type: redis, redis: {wait_timeout: "+in+"}}\n")
		if got := !strings.Contains(fmt.Sprint(cfg.Validate()), "store.redis.wait_timeout"); got != ok {
			t.Errorf("wait_timeout %s: accepted %v, want %v", in, got, ok)
		}
	}
}

// webhook.callback_token is off by default and, when set, long and plain.
func TestCallbackToken(t *testing.T) {
	if cfg := load(t, ""); cfg.Webhook.CallbackToken != "" {
		t.Fatalf("default webhook.callback_token = %q, want none", cfg.Webhook.CallbackToken)
	}
	long := strings.Repeat("k", config.MinCallbackToken)
	for in, ok := range map[string]bool{
		`""`: true, long: true, long[1:]: false, `"` + long + ` x"`: false, `"` + long + `\t"`: false, `"` + long + `é"`: false,
	} {
		cfg := load(t, "webhook: {callback_token: "+in+"}\n")
		errs := fmt.Sprint(cfg.Validate())
		if got := !strings.Contains(errs, "webhook.callback_token"); got != ok {
			t.Errorf("callback_token %s: accepted %v, want %v (%s)", in, got, ok, errs)
		}
	}
}

// Ad responses are not cacheable unless an endpoint says otherwise.
func TestResponseCacheControl(t *testing.T) {
	cfg := load(t, "endpoints:\n  a: {source: store}\n  b: {source: store, cache_control: \"public, max-age=60\"}\n  c: {source: store, cache_control: none}\n")
	for name, want := range map[string]string{"a": "no-store", "b": "public, max-age=60", "c": ""} {
		if got := cfg.Endpoints[name].ResponseCacheControl(); got != want {
			t.Errorf("endpoint %s: Cache-Control %q, want %q", name, got, want)
		}
	}
}

// cors_origins takes serialized origins, or "*" alone.
func TestCORSOrigins(t *testing.T) {
	cfg := load(t, "endpoints:\n  a: {source: store, cors_origins: [\"https://pub.example\"]}\n")
	if errs := cfg.Validate(); len(errs) != 0 || cfg.Endpoints["a"].CORSMaxAge != config.DefaultCORSMaxAge {
		t.Fatalf("errors %v, max age %v", errs, cfg.Endpoints["a"].CORSMaxAge)
	}
	for in, ok := range map[string]bool{
		`["*"]`: true, `["https://pub.example"]`: true, `["http://localhost:8000", "https://a.b.example"]`: true,
		`["*", "https://pub.example"]`: false, `["https://pub.example/"]`: false, `["https://pub.example/path"]`: false,
		`["pub.example"]`: false, `["ftp://pub.example"]`: false, `["https://PUB.example"]`: false,
		`["https://user@pub.example"]`: false, `["https://pub.example:"]`: false, `["https://pub.example?x"]`: false,
	} {
		cfg := load(t, "endpoints:\n  a: {source: store, cors_origins: "+in+"}\n")
		errs := fmt.Sprint(cfg.Validate())
		if got := !strings.Contains(errs, "cors_origins"); got != ok {
			t.Errorf("cors_origins %s: accepted %v, want %v (%s)", in, got, ok, errs)
		}
	}
	for in, ok := range map[string]bool{"0s": true, "24h": true, "25h": false, "-1s": false} {
		cfg := load(t, "endpoints:\n  a: {source: store, cors_max_age: "+in+"}\n")
		errs := fmt.Sprint(cfg.Validate())
		if got := !strings.Contains(errs, "cors_max_age"); got != ok {
			t.Errorf("cors_max_age %s: accepted %v, want %v (%s)", in, got, ok, errs)
		}
	}
}

// An admin listener reachable from the network without TLS is refused
// unless admin.allow_plaintext, and then warned about.
func TestRisks(t *testing.T) {
	for listen, risky := range map[string]bool{
		"127.0.0.1:4001": false, "[::1]:4001": false, "localhost:4001": false, "": false,
		":4001": true, "0.0.0.0:4001": true, "10.0.0.5:4001": true, "[::]:4001": true, "admin.example.com:4001": true,
	} {
		// Refused unless allowed, and warned about when allowed.
		cfg := load(t, "", "TSUBAME_ADMIN_LISTEN="+listen)
		if refused := len(cfg.Validate()) > 0; refused != risky {
			t.Errorf("admin.listen %q: refused %v, want %v (%v)", listen, refused, risky, cfg.Validate())
		}
		cfg = load(t, "", "TSUBAME_ADMIN_LISTEN="+listen, "TSUBAME_ADMIN_ALLOW_PLAINTEXT=true")
		if got := len(cfg.Risks()) > 0; got != risky || len(cfg.Validate()) > 0 {
			t.Errorf("admin.listen %q allowed: risk %v, want %v (%q, %v)", listen, got, risky, cfg.Risks(), cfg.Validate())
		}
	}
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	cfg := load(t, "", "TSUBAME_ADMIN_LISTEN=:4001", "TSUBAME_ADMIN_TLS_CERT="+cert, "TSUBAME_ADMIN_TLS_KEY="+key)
	if r := cfg.Risks(); len(r) > 0 {
		t.Errorf("with TLS: %q", r)
	}
}

// The Kafka shipper's settings: the brokers from the environment as a
// list, every bad value reported (never the password), and a valid TLS + SCRAM
// setup accepted.
func TestKafkaConfig(t *testing.T) {
	cfg := load(t, "", "TSUBAME_ACCESS_LOG_KAFKA_BROKERS=k1:9092,k2:9093", "TSUBAME_ACCESS_LOG_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
		"TSUBAME_ACCESS_LOG_KAFKA_SASL_USERNAME=ship", "TSUBAME_ACCESS_LOG_KAFKA_SASL_PASSWORD=s3cret-pass",
		"TSUBAME_ACCESS_LOG_KAFKA_TLS_ENABLED=true")
	if got := cfg.AccessLog.Kafka.Brokers; len(got) != 2 || got[0] != "k1:9092" || got[1] != "k2:9093" {
		t.Fatalf("brokers = %q", got)
	}
	if errs := cfg.Validate(); len(errs) != 0 {
		t.Fatalf("valid shipper settings refused: %v", errs)
	}
	if !cfg.AccessLog.Kafka.Enabled() || cfg.AccessLog.Kafka.Topic != "tsubame-access" || cfg.AccessLog.Kafka.Acks != "all" {
		t.Fatalf("kafka = %+v", cfg.AccessLog.Kafka)
	}

	bad := load(t, `
access_log:
  kafka:
    brokers: [nonsense]
    topic: "bad topic"
    compression: brotli
    acks: "1"
    partition_by: host
    batch_bytes: 10B
    buffer_records: 5
    poll_interval: 0s
    tls: {cert_file: /no/such.pem}
    sasl: {mechanism: PLAIN, username: u, password: p}
`)
	text := ""
	for _, e := range bad.Validate() {
		text += e.Error() + "\n"
	}
	for _, want := range []string{"access_log.kafka.brokers:", "access_log.kafka.topic:", "access_log.kafka.compression:",
		"access_log.kafka.acks:", "access_log.kafka.partition_by:", "access_log.kafka.batch_bytes:",
		"access_log.kafka.buffer_records:", "access_log.kafka.poll_interval:", "cert_file and key_file",
		"PLAIN sends the password"} {
		if !strings.Contains(text, want) {
			t.Errorf("Validate does not report %q; got:\n%s", want, text)
		}
	}
	if strings.Contains(text, "\"p\"") {
		t.Error("an error shows the password")
	}
	noFile := load(t, "endpoints: {x: {source: store}}\nads: {enabled: false}\n", "TSUBAME_ACCESS_LOG_KAFKA_BROKERS=k1:9092")
	if errs := fmt.Sprint(noFile.Validate()); !strings.Contains(errs, "no endpoint has access_log: file") {
		t.Errorf("a shipper without a file log is accepted: %s", errs)
	}
}

// The cache owns its defaults; defaults.yaml says the same (a change to
// one without the other fails here), and stale_if_error: 0 turns the
// feature off rather than taking the cache's default.
func TestCacheDefaultsAgree(t *testing.T) {
	cfg := load(t, "")
	if got := cfg.Cache.Options(); !reflect.DeepEqual(got, cache.Defaults) {
		t.Fatalf("defaults.yaml cache: %+v\ncache.Defaults:     %+v", got, cache.Defaults)
	}
	off := load(t, "cache:\n  stale_if_error: 0s\n")
	if got := off.Cache.Options().StaleIfError; got != cache.NoStaleIfError {
		t.Fatalf("stale_if_error 0: %v", got)
	}
}

// The public listener and the static server own their defaults too.
func TestServerAndStaticDefaultsAgree(t *testing.T) {
	cfg := load(t, "")
	if got := cfg.Server.Options(); !reflect.DeepEqual(got, server.Defaults) {
		t.Errorf("defaults.yaml server: %+v\nserver.Defaults:     %+v", got, server.Defaults)
	}
	got, d := cfg.Static.Options(""), static.Defaults
	if got.CacheBytes != d.CacheBytes || got.MaxFiles != d.MaxFiles || got.MaxBytes != d.MaxBytes {
		t.Errorf("defaults.yaml static: %+v\nstatic.Defaults:     %+v", got, d)
	}
}

// And the admin server.
func TestAdminDefaultsAgree(t *testing.T) {
	got, d := load(t, "").Admin.Options(), admin.Defaults
	if got.SessionIdle != d.SessionIdle || got.SessionMax != d.SessionMax || got.MaxImportBytes != d.MaxImportBytes {
		t.Errorf("defaults.yaml admin: %+v\nadmin.Defaults:     %+v", got, d)
	}
}

// The webhook processor and the access log own their defaults too.
func TestWebhookAndAccessLogDefaultsAgree(t *testing.T) {
	cfg := load(t, "")
	w, d := cfg.Webhook.Options(), webhook.Defaults
	if w.QueueSize != d.QueueSize || w.DedupeWindow != d.DedupeWindow || w.DedupeMax != d.DedupeMax ||
		w.StoreConcurrency != d.StoreConcurrency || w.API.Timeout != d.API.Timeout || w.API.Backoff != d.API.Backoff ||
		w.API.MaxBackoff != d.API.MaxBackoff {
		t.Errorf("defaults.yaml webhook: %+v\nwebhook.Defaults: %+v", w, d)
	}
	a, ad := cfg.AccessLog.LoggerOptions(), accesslog.Defaults
	if a.FlushInterval != ad.FlushInterval || a.BufferBytes != ad.BufferBytes || a.MaxWait != ad.MaxWait {
		t.Errorf("defaults.yaml access_log: %+v\naccesslog.Defaults: %+v", a, ad)
	}
}

func TestHSTSHeader(t *testing.T) {
	for _, c := range []struct {
		tls  config.TLS
		want string
	}{
		{config.TLS{}, ""},
		{config.TLS{HSTS: 8760 * time.Hour}, "max-age=31536000"},
		{config.TLS{HSTS: 24 * time.Hour, HSTSSubdomains: true}, "max-age=86400; includeSubDomains"},
	} {
		if got := c.tls.HSTSHeader(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.tls, got, c.want)
		}
	}
	cfg := load(t, "tls:\n  hsts: 8760h\n")
	var found bool
	for _, err := range cfg.Validate() {
		found = found || strings.Contains(err.Error(), "tls.hsts: Strict-Transport-Security is sent over TLS only")
	}
	if !found {
		t.Errorf("tls.hsts without tls.listen: not reported (%v)", cfg.Validate())
	}
}

// The budget keys: a reservation, its grace and the rounds must fit in the
// tracking URL's life (an impression is known for as long); the lease
// must outlast two rounds; the holder is a short printable name.
func TestValidateAdsBudget(t *testing.T) {
	for _, tc := range []struct {
		yaml, want string
	}{
		{"ads: {reservation: 0s}", "ads.reservation: must be between 1s and ads.tracking.ttl"},
		{"ads: {reservation: 25h}", "ads.reservation: must be between 1s and ads.tracking.ttl"},
		{"ads: {reservation: 24h}", "must fit in ads.tracking.ttl"},
		{"ads: {tracking: {ttl: 10m}, reservation: 10m}", "must fit in ads.tracking.ttl"},
		{"ads: {budget: {interval: 1ms}}", "ads.budget.interval: must be between 10ms and 1m"},
		{"ads: {budget: {grace: 0s}}", "ads.budget.grace: must be between 1s and 1h"},
		{"ads: {budget: {interval: 1m, lease: 1m}}", "ads.budget.lease: must be between twice ads.budget.interval"},
		{"ads: {budget: {holder: \"node a\"}}", "ads.budget.holder: must be at most 64 printable ASCII characters without spaces"},
	} {
		cfg := load(t, tc.yaml)
		text := ""
		for _, e := range cfg.Validate() {
			text += e.Error() + "\n"
		}
		if !strings.Contains(text, tc.want) {
			t.Errorf("%s: Validate says\n%s\nwant %q", tc.yaml, text, tc.want)
		}
	}
	if errs := load(t, "ads: {tracking: {ttl: 1h}, reservation: 30m}").Validate(); len(errs) != 0 {
		t.Errorf("a valid budget section refused: %v", errs)
	}
}

// A file that is not YAML names its line and the keys it is under; an
// unknown key in a named map entry (an endpoint, a site's endpoint) names
// its line and the key meant; a rule broken by a key set in the file names
// that key's line.
func TestProblemsNameTheirLines(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ text, want string }{
		{"ads:\n  currency: USD\nserver:\n  listen: 127.0.0.1:0\n   bad: indent\n",
			`t.yaml:5: under server.listen: yaml: line 5: mapping values are not allowed in this context`},
		{"endpoints:\n  top:\n    source: store\n    cahce: true\n",
			`t.yaml:4: endpoints.top.cahce: unknown key; did you mean cache?`},
		{"sites:\n  news:\n    hosts: [news.example]\n    endpoints:\n      top: {source: store, formts: [js]}\n",
			`t.yaml:5: sites.news.endpoints.top.formts: unknown key; did you mean formats?`},
		{"ads:\n  curency: USD\n", `t.yaml:2: ads.curency: unknown key; did you mean currency?`},
		{"ads:\n  reservation: 0s\n", `t.yaml:2: ads.reservation: must be between 1s and ads.tracking.ttl`},
	} {
		path := filepath.Join(dir, "t.yaml")
		if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := config.LoadValid(path, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.text, err, tc.want)
		}
	}
}
