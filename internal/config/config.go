// Package config loads Tsubame's configuration: the defaults in
// defaults.yaml, then an optional YAML file, then TSUBAME_* environment
// variables, into a typed Config whose Validate reports every problem at once.
//
// It may import the packages whose enums and parsers it uses (render's formats, admin's syslog addresses, certs); no package under internal imports it: cmd/tsubame hands each its options (arch_test.go).
package config

import (
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/admin"
	"tsubame/internal/cache"
	"tsubame/internal/certs"
	"tsubame/internal/render"
	"tsubame/internal/server"
	"tsubame/internal/ssp"
	"tsubame/internal/static"
	"tsubame/internal/units"
	"tsubame/internal/webhook"
)

// DefaultsYAML is the documented default configuration.
//
//go:embed defaults.yaml
var DefaultsYAML []byte

// EnvPrefix starts every environment variable the configuration reads.
const EnvPrefix = "TSUBAME_"

// EnvConfigFile names the config file when -config is not given.
const EnvConfigFile = EnvPrefix + "CONFIG"

// EnvInherit is set by a restarting server for its successor (the
// listening sockets it hands over); it is not a configuration key.
const EnvInherit = EnvPrefix + "INHERIT"

// Config is the whole configuration. Field tags name the YAML keys; the env
// tag, where present, is an extra, shorter environment variable name.
type Config struct {
	// lines is where the file Load read set each key, for problems.
	lines *fileLines

	Listen    string              `koanf:"listen"`
	DataDir   string              `koanf:"data_dir"`
	Admin     Admin               `koanf:"admin"`
	Log       Log                 `koanf:"log"`
	Store     Store               `koanf:"store"`
	Cache     Cache               `koanf:"cache"`
	AccessLog AccessLog           `koanf:"access_log"`
	Webhook   Webhook             `koanf:"webhook"`
	Static    Static              `koanf:"static"`
	Server    Server              `koanf:"server"`
	TLS       TLS                 `koanf:"tls"`
	Endpoints map[string]Endpoint `koanf:"endpoints"`
	// Sites are virtual hosts with endpoints and static files of their own.
	// The top-level endpoints and static root make the default site, which
	// answers hosts no site names unless UnknownHosts is "reject".
	Sites        map[string]Site `koanf:"sites"`
	UnknownHosts string          `koanf:"unknown_hosts"`
	// Templates are response templates by name, shared by every site.
	Templates map[string]Template `koanf:"templates"`
	// VAST configures the .xml format's VAST documents.
	VAST VAST `koanf:"vast"`
	// Ads configures deciding and tracking; Geo and Device the visitor
	// attributes targeting reads.
	Ads    Ads    `koanf:"ads"`
	Geo    Geo    `koanf:"geo"`
	Device Device `koanf:"device"`
	// RTB configures the OpenRTB bidder.
	RTB RTB `koanf:"rtb"`
	// Report configures the delivery and billing reports.
	Report Report `koanf:"report"`
	// SSP configures the sell side: a module owning its keys, defaults
	// and validation (ssp.DefaultsYAML, ssp.Config.Validate).
	SSP ssp.Config `koanf:"ssp"`
}

// ModuleDefaults are the defaults of the modules that own their
// sections, loaded after DefaultsYAML: each documents its own keys.
var ModuleDefaults = [][]byte{ssp.DefaultsYAML}

// VAST configures the VAST 4 documents endpoints serve as .xml.
type VAST struct {
	AdSystem      string `koanf:"ad_system"`
	ImpressionURL string `koanf:"impression_url"`
}

// Template is a response template: its text, or a file holding it.
type Template struct {
	File string `koanf:"file"`
	Text string `koanf:"text"`
}

// Source returns the template's text, reading the file if it has one.
func (t Template) Source() (string, error) {
	if t.File == "" {
		return t.Text, nil
	}
	b, err := os.ReadFile(t.File)
	return string(b), err
}

// TemplatesFor returns the templates a site sees: the shared ones, and the
// site's own over them. site "" is the default site.
func (c *Config) TemplatesFor(site string) map[string]Template {
	out := maps.Clone(c.Templates)
	if out == nil {
		out = map[string]Template{}
	}
	for name, t := range c.Sites[site].Templates {
		out[name] = t
	}
	return out
}

// Site is one virtual host.
type Site struct {
	Hosts      []string            `koanf:"hosts"` // exact names, or *.example.com for every subdomain
	Endpoints  map[string]Endpoint `koanf:"endpoints"`
	StaticRoot string              `koanf:"static_root"`
	Templates  map[string]Template `koanf:"templates"`
	// TLSCert and TLSKey are the site's certificate for the TLS listener,
	// presented to clients whose SNI name is one of Hosts.
	TLSCert string `koanf:"tls_cert"`
	TLSKey  string `koanf:"tls_key"`
	// Privacy overrides ads.privacy for the site's visitors.
	Privacy string `koanf:"privacy"`
}

// TLS configures the public TLS listener.
type TLS struct {
	Listen     string `koanf:"listen"`      // "" serves no TLS
	Cert       string `koanf:"cert"`        // the default certificate chain (PEM)
	Key        string `koanf:"key"`         // its private key (PEM)
	MinVersion string `koanf:"min_version"` // 1.2 or 1.3
	// HSTS is the max-age of a Strict-Transport-Security header on every
	// answer over TLS (0: none); HSTSSubdomains adds includeSubDomains.
	HSTS           time.Duration `koanf:"hsts"`
	HSTSSubdomains bool          `koanf:"hsts_include_subdomains"`
}

// HSTSHeader is the Strict-Transport-Security value tls.hsts asks for, or "".
func (t TLS) HSTSHeader() string {
	if t.HSTS <= 0 {
		return ""
	}
	v := "max-age=" + strconv.FormatInt(int64(t.HSTS/time.Second), 10)
	if t.HSTSSubdomains {
		v += "; includeSubDomains"
	}
	return v
}

// TLSCertificates returns the default pair and the sites' pairs for
// certs.Store.Load.
func (c *Config) TLSCertificates() (certs.Pair, []certs.Site) {
	var sites []certs.Site
	for _, name := range sortedKeys(c.Sites) {
		st := c.Sites[name]
		if st.TLSCert != "" || st.TLSKey != "" {
			sites = append(sites, certs.Site{Name: name, Hosts: st.Hosts, Pair: certs.Pair{Cert: st.TLSCert, Key: st.TLSKey}})
		}
	}
	return certs.Pair{Cert: c.TLS.Cert, Key: c.TLS.Key}, sites
}

// Admin configures the admin listener, its users and its audit log.
type Admin struct {
	Listen              string        `koanf:"listen"`
	TLSCert             string        `koanf:"tls_cert"`
	TLSKey              string        `koanf:"tls_key"`
	AllowPlaintext      bool          `koanf:"allow_plaintext"`
	Hosts               []string      `koanf:"hosts"`
	Dir                 string        `koanf:"dir"`
	Socket              string        `koanf:"socket"`
	AuditLog            string        `koanf:"audit_log"`
	SessionIdle         time.Duration `koanf:"session_idle"`
	SessionMax          time.Duration `koanf:"session_max"`
	MaxTokenTTL         time.Duration `koanf:"max_token_ttl"`
	MinPasswordLength   int           `koanf:"min_password_length"`
	MinPasswordScore    int           `koanf:"min_password_score"`
	RequireTOTP         bool          `koanf:"require_totp"`
	LoginFreeFailures   int           `koanf:"login_free_failures"`
	LoginMaxDelay       time.Duration `koanf:"login_max_delay"`
	LoginPerMinute      int           `koanf:"login_per_minute"`
	AlertFailures       int           `koanf:"alert_failures"`
	AlertWindow         time.Duration `koanf:"alert_window"`
	AuditRepeatInterval time.Duration `koanf:"audit_repeat_interval"`
	AuditMaxSize        ByteSize      `koanf:"audit_max_size"`
	AuditRotateEvery    time.Duration `koanf:"audit_rotate_every"`
	AuditKeepFiles      int           `koanf:"audit_keep_files"`
	AuditSyslog         string        `koanf:"audit_syslog"`
	AuditSyslogFacility string        `koanf:"audit_syslog_facility"`
	AuditSyslogCAFile   string        `koanf:"audit_syslog_ca_file"`
	AlertWebhook        string        `koanf:"alert_webhook" secret:"true"`
	AlertWebhookCAFile  string        `koanf:"alert_webhook_ca_file"`
	MetricsPublic       bool          `koanf:"metrics_public"`
	Pprof               bool          `koanf:"pprof"`
	MaxImportBytes      ByteSize      `koanf:"max_import_bytes"`
}

// AdminDir is where the admin users, tokens and audit log live.
func (c *Config) AdminDir() string {
	if c.Admin.Dir != "" {
		return c.Admin.Dir
	}
	return filepath.Join(c.DataDir, "admin")
}

// SocketOff is the admin.socket value that turns the control socket off.
const SocketOff = "off"

// AdminSocketPath is the control socket's path (admin.socket, else
// admin.SocketName in admin.dir), or "" when admin.socket is off.
func (c *Config) AdminSocketPath() string {
	switch c.Admin.Socket {
	case SocketOff:
		return ""
	case "":
		return filepath.Join(c.AdminDir(), admin.SocketName)
	}
	return c.Admin.Socket
}

// AuditLogPath is the admin audit log's file.
func (c *Config) AuditLogPath() string {
	if c.Admin.AuditLog != "" {
		return c.Admin.AuditLog
	}
	return filepath.Join(c.AdminDir(), "audit.log")
}

// Log configures the process log.
type Log struct {
	Level          string        `koanf:"level"`
	Format         string        `koanf:"format"`
	RepeatInterval time.Duration `koanf:"repeat_interval"`
}

// Store selects and configures the placement store.
type Store struct {
	Type string `koanf:"type" env:"TSUBAME_STORE"`
	// ProbeInterval is how often the store is probed for /readyz?verbose,
	// tsubame_store_up and the admin's stats; it bounds each probe too.
	ProbeInterval time.Duration `koanf:"probe_interval"`
	Embedded      EmbeddedStore `koanf:"embedded"`
	Redis         RedisStore    `koanf:"redis"`
}

// RedisStore configures the Redis store.
type RedisStore struct {
	Addrs       []string      `koanf:"addrs" env:"TSUBAME_REDIS_ADDRS"`
	Username    string        `koanf:"username"`
	Password    string        `koanf:"password" secret:"true"`
	TLS         bool          `koanf:"tls"`
	TLSCAFile   string        `koanf:"tls_ca_file"`
	KeyPrefix   string        `koanf:"key_prefix"`
	DialTimeout time.Duration `koanf:"dial_timeout"`
	Timeout     time.Duration `koanf:"timeout"`
	PoolSize    int           `koanf:"pool_size"`
	// MaxFlushDelay lets commands from concurrent requests gather into one
	// write to Redis (0: every command is written at once).
	MaxFlushDelay time.Duration `koanf:"max_flush_delay"`
	// WaitReplicas is how many replicas must acknowledge a budget write
	// before it counts: "auto", "off" or a number (WaitCount).
	WaitReplicas string        `koanf:"wait_replicas"`
	WaitTimeout  time.Duration `koanf:"wait_timeout"`
}

// WaitCount is wait_replicas as the Redis store's Options.WaitReplicas
// takes it: 0 for auto, -1 for off, else the number of replicas.
func (r RedisStore) WaitCount() (int, error) {
	switch r.WaitReplicas {
	case "auto", "":
		return 0, nil
	case "off":
		return -1, nil
	}
	n, err := strconv.Atoi(r.WaitReplicas)
	if err != nil || n < 1 || n > 16 {
		return 0, fmt.Errorf("%q is not auto, off or a number of replicas from 1 to 16", r.WaitReplicas)
	}
	return n, nil
}

// EmbeddedStore configures the bbolt store.
type EmbeddedStore struct {
	Path        string        `koanf:"path"`
	LockTimeout time.Duration `koanf:"lock_timeout"`
}

// Cache configures the in-process placement cache.
type Cache struct {
	MaxBytes      ByteSize      `koanf:"max_bytes"`
	TTL           time.Duration `koanf:"ttl"`
	NegativeTTL   time.Duration `koanf:"negative_ttl"`
	StaleIfError  time.Duration `koanf:"stale_if_error"`
	RetryInterval time.Duration `koanf:"retry_interval"`
	LoadTimeout   time.Duration `koanf:"load_timeout"`
	// BreakerFailures < 0 disables the circuit breaker.
	BreakerFailures int           `koanf:"breaker_failures"`
	BreakerCooldown time.Duration `koanf:"breaker_cooldown"`
	MaxLoads        int           `koanf:"max_loads"`
	LoadWait        time.Duration `koanf:"load_wait"`
	WarmIDs         int           `koanf:"warm_ids"`
	WarmTimeout     time.Duration `koanf:"warm_timeout"`
}

// Options are the cache's options this section sets (the caller adds the
// encoders and the logger). stale_if_error: 0 turns it off, which the
// cache spells NoStaleIfError (its zero takes the default).
func (c Cache) Options() cache.Options {
	stale := c.StaleIfError
	if stale == 0 {
		stale = cache.NoStaleIfError
	}
	return cache.Options{MaxBytes: uint64(c.MaxBytes), TTL: c.TTL, NegativeTTL: c.NegativeTTL, StaleIfError: stale,
		RetryInterval: c.RetryInterval, LoadTimeout: c.LoadTimeout, BreakerFailures: c.BreakerFailures,
		BreakerCooldown: c.BreakerCooldown, MaxLoads: c.MaxLoads, LoadWait: c.LoadWait}
}

// LoggerOptions are the access log's buffering options this section sets
// (the caller adds the format's encoder and the logger).
func (a AccessLog) LoggerOptions() accesslog.Options {
	format, _ := accesslog.ParseFormat(a.Format) // checked by Validate
	return accesslog.Options{Format: format, FlushInterval: a.FlushInterval, BufferBytes: int(a.BufferBytes),
		MaxWait: a.MaxWait, Sync: a.Durability == "sync", FallbackDir: a.FallbackDir}
}

// AccessLog configures the access logs.
type AccessLog struct {
	Dir           string        `koanf:"dir"`
	Format        string        `koanf:"format"`
	FileName      string        `koanf:"file_name"`
	RotateEvery   time.Duration `koanf:"rotate_every"`
	MaxSize       ByteSize      `koanf:"max_size"`
	Gzip          bool          `koanf:"gzip"`
	OnClose       []string      `koanf:"on_close"`
	KeepFiles     int           `koanf:"keep_files"`
	KeepDays      int           `koanf:"keep_days"`
	FlushInterval time.Duration `koanf:"flush_interval"`
	BufferBytes   ByteSize      `koanf:"buffer_bytes"`
	MaxWait       time.Duration `koanf:"max_wait"`
	Durability    string        `koanf:"durability"`
	FallbackDir   string        `koanf:"fallback_dir"`
	// StoreCompression is how access_log: store batches are kept: s2 or none.
	StoreCompression string `koanf:"store_compression"`
	// Kafka ships the file log's lines to Kafka when Brokers is set.
	Kafka Kafka `koanf:"kafka"`
}

// Kafka configures the access log's Kafka shipper.
type Kafka struct {
	Brokers       []string      `koanf:"brokers"`
	Topic         string        `koanf:"topic"`
	ClientID      string        `koanf:"client_id"`
	NodeID        string        `koanf:"node_id"`
	Compression   string        `koanf:"compression"`
	Acks          string        `koanf:"acks"`
	PartitionBy   string        `koanf:"partition_by"`
	BatchBytes    ByteSize      `koanf:"batch_bytes"`
	Linger        time.Duration `koanf:"linger"`
	BufferRecords int           `koanf:"buffer_records"`
	PollInterval  time.Duration `koanf:"poll_interval"`
	StateInterval time.Duration `koanf:"state_interval"`
	StateFile     string        `koanf:"state_file"`
	LagAlert      time.Duration `koanf:"lag_alert"`
	TLS           KafkaTLS      `koanf:"tls"`
	SASL          KafkaSASL     `koanf:"sasl"`
}

// KafkaTLS configures TLS to the brokers.
type KafkaTLS struct {
	Enabled    bool   `koanf:"enabled"`
	CAFile     string `koanf:"ca_file"`
	CertFile   string `koanf:"cert_file"`
	KeyFile    string `koanf:"key_file"`
	ServerName string `koanf:"server_name"`
}

// KafkaSASL configures SASL authentication to the brokers.
type KafkaSASL struct {
	Mechanism string `koanf:"mechanism"`
	Username  string `koanf:"username"`
	Password  string `koanf:"password" secret:"true"`
}

// Enabled reports whether the shipper runs.
func (k Kafka) Enabled() bool { return len(k.Brokers) > 0 }

var kafkaTopic = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

func (c *Config) validateKafka(add func(string, ...any)) {
	k := c.AccessLog.Kafka
	if !k.Enabled() {
		return
	}
	if !c.UsesLog(LogFile) {
		add("access_log.kafka: the shipper reads the file log, and nothing writes it (no endpoint has access_log: file, and ads.enabled is false)")
	}
	for _, b := range k.Brokers {
		if err := checkAddr(b); err != nil {
			add("access_log.kafka.brokers: %v", err)
		}
	}
	if !kafkaTopic.MatchString(k.Topic) || k.Topic == "." || k.Topic == ".." {
		add("access_log.kafka.topic: %q is not a Kafka topic name (letters, digits, '.', '_', '-'; at most 249)", k.Topic)
	}
	if k.ClientID == "" {
		add("access_log.kafka.client_id: must not be empty")
	}
	if strings.ContainsAny(k.NodeID, "/\n") {
		add("access_log.kafka.node_id: %q must not hold '/' or a newline (it is part of every record id)", k.NodeID)
	}
	if !slices.Contains([]string{"lz4", "zstd", "snappy", "gzip", "none"}, k.Compression) {
		add("access_log.kafka.compression: %q is not one of lz4, zstd, snappy, gzip, none", k.Compression)
	}
	if k.Acks != "all" {
		add("access_log.kafka.acks: %q: only all is accepted (the idempotent producer that keeps lines from being lost or doubled needs every in-sync replica's ack)", k.Acks)
	}
	if k.PartitionBy != "placement" && k.PartitionBy != "none" {
		add("access_log.kafka.partition_by: %q is not one of placement, none", k.PartitionBy)
	}
	if k.BatchBytes < 1<<10 || k.BatchBytes > 64<<20 {
		add("access_log.kafka.batch_bytes: must be between 1KiB and 64MiB (got %v)", k.BatchBytes)
	}
	if k.Linger < 0 || k.Linger > time.Minute {
		add("access_log.kafka.linger: must be between 0 and 1m (got %v)", k.Linger)
	}
	if k.BufferRecords < 1000 {
		add("access_log.kafka.buffer_records: must be at least 1000 (got %d)", k.BufferRecords)
	}
	if k.PollInterval < time.Millisecond || k.PollInterval > 10*time.Second {
		add("access_log.kafka.poll_interval: must be between 1ms and 10s (got %v)", k.PollInterval)
	}
	if k.StateInterval < 10*time.Millisecond || k.StateInterval > time.Minute {
		add("access_log.kafka.state_interval: must be between 10ms and 1m (got %v)", k.StateInterval)
	}
	if k.LagAlert < 0 {
		add("access_log.kafka.lag_alert: must not be negative (0 disables)")
	}
	t := k.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		add("access_log.kafka.tls.cert_file and key_file: give both or neither")
	}
	if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.ServerName != "") {
		add("access_log.kafka.tls: files or server_name are set but enabled is false")
	}
	for name, f := range map[string]string{"ca_file": t.CAFile, "cert_file": t.CertFile, "key_file": t.KeyFile} {
		if f != "" {
			if _, err := os.Stat(f); err != nil {
				add("access_log.kafka.tls.%s: %v", name, err)
			}
		}
	}
	switch a := k.SASL; a.Mechanism {
	case "":
		if a.Username != "" || a.Password != "" {
			add("access_log.kafka.sasl: username or password set without a mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
		}
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if a.Username == "" || a.Password == "" {
			add("access_log.kafka.sasl: %s needs username and password", a.Mechanism)
		}
		if a.Mechanism == "PLAIN" && !t.Enabled {
			add("access_log.kafka.sasl: PLAIN sends the password as it is: it needs tls.enabled (or use SCRAM)")
		}
	default:
		add("access_log.kafka.sasl.mechanism: %q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", a.Mechanism)
	}
}

// Options are the admin server's options this section sets (the caller
// adds the accounts, audit, stores, TLS and the views it serves).
func (a Admin) Options() admin.Options {
	return admin.Options{MetricsPublic: a.MetricsPublic, Pprof: a.Pprof,
		Policy:      admin.PasswordPolicy{MinLength: a.MinPasswordLength, MinScore: a.MinPasswordScore},
		RequireTOTP: a.RequireTOTP, SessionIdle: a.SessionIdle, SessionMax: a.SessionMax,
		LoginFreeFailures: a.LoginFreeFailures, LoginMaxDelay: a.LoginMaxDelay, LoginPerMinute: a.LoginPerMinute,
		MaxImportBytes: int64(a.MaxImportBytes), MaxTokenTTL: a.MaxTokenTTL, Hosts: a.Hosts}
}

// Webhook configures the webhook receivers and their message processing.
type Webhook struct {
	// CallbackToken turns POST /callback on; requests must carry it as a bearer token.
	CallbackToken    string        `koanf:"callback_token" secret:"true"`
	LINE             LINE          `koanf:"line"`
	Slack            Slack         `koanf:"slack"`
	MaxBodyBytes     ByteSize      `koanf:"max_body_bytes"`
	QueueSize        int           `koanf:"queue_size"`
	MaxInFlight      int           `koanf:"max_in_flight"`
	DedupeWindow     time.Duration `koanf:"dedupe_window"`
	DedupeMax        int           `koanf:"dedupe_max"`
	DrainTimeout     time.Duration `koanf:"drain_timeout"`
	DeadLetter       string        `koanf:"dead_letter"`
	RecordResults    bool          `koanf:"record_results"`
	StoreConcurrency int           `koanf:"store_concurrency"`
	API              WebhookAPI    `koanf:"api"`
}

// Options are the webhook processor's options this section sets (the
// caller adds the result store, the dead-letter path and the logger).
func (w Webhook) Options() webhook.Options {
	return webhook.Options{QueueSize: w.QueueSize, MaxInFlight: w.MaxInFlight, DedupeWindow: w.DedupeWindow,
		DedupeMax: w.DedupeMax, StoreConcurrency: w.StoreConcurrency,
		API: webhook.APIOptions{URL: w.API.URL, Token: w.API.Token, Timeout: w.API.Timeout, Retries: w.API.Retries,
			Backoff: w.API.Backoff, MaxBackoff: w.API.MaxBackoff, H2C: w.API.H2C, MaxConns: w.API.MaxConns, H2Conns: w.API.MaxConns},
		Platforms: w.Platforms()}
}

// Platforms are the webhook platforms configured, besides the callback.
func (w Webhook) Platforms() []webhook.Platform {
	var out []webhook.Platform
	if w.LINE.ChannelSecret != "" {
		out = append(out, webhook.NewLINE(w.LINE.ChannelSecret))
	}
	if w.Slack.SigningSecret != "" {
		out = append(out, webhook.NewSlack(w.Slack.SigningSecret, w.Slack.BotToken, w.Slack.APIURL))
	}
	return out
}

// Enabled reports whether any webhook endpoint is served.
func (w Webhook) Enabled() bool { return w.CallbackToken != "" || len(w.Platforms()) > 0 }

// MinCallbackToken is the shortest webhook.callback_token accepted.
const MinCallbackToken = 32

// LINE configures the LINE Messaging API receiver.
type LINE struct {
	ChannelSecret string `koanf:"channel_secret" env:"TSUBAME_LINE_CHANNEL_SECRET" secret:"true"`
}

// Slack configures the Slack Events API receiver.
type Slack struct {
	SigningSecret string `koanf:"signing_secret" env:"TSUBAME_SLACK_SIGNING_SECRET" secret:"true"`
	BotToken      string `koanf:"bot_token" env:"TSUBAME_SLACK_BOT_TOKEN" secret:"true"`
	APIURL        string `koanf:"api_url"`
}

// WebhookAPI configures the external API called for each message.
type WebhookAPI struct {
	URL        string        `koanf:"url"`
	Token      string        `koanf:"token" secret:"true"`
	Timeout    time.Duration `koanf:"timeout"`
	Retries    int           `koanf:"retries"`
	Backoff    time.Duration `koanf:"backoff"`
	MaxBackoff time.Duration `koanf:"max_backoff"`
	H2C        bool          `koanf:"h2c"`
	MaxConns   int           `koanf:"max_conns"`
}

// DeadLetterPath is webhook.dead_letter, or webhook-deadletter.jsonl in the data directory.
func (c *Config) DeadLetterPath() string {
	if c.Webhook.DeadLetter != "" {
		return c.Webhook.DeadLetter
	}
	return strings.TrimSuffix(c.DataDir, "/") + "/webhook-deadletter.jsonl"
}

// Static configures /lib/.
type Static struct {
	Root       string   `koanf:"root"`
	CacheBytes ByteSize `koanf:"cache_bytes"`
	MaxFiles   int      `koanf:"max_files"`
	MaxBytes   ByteSize `koanf:"max_bytes"`
}

// Options are the static server's options this section sets, for root
// (the section's, or a site's).
func (s Static) Options(root string) static.Options {
	return static.Options{Root: root, CacheBytes: uint64(s.CacheBytes), MaxFiles: s.MaxFiles, MaxBytes: int64(s.MaxBytes)}
}

// Access log destinations of an endpoint.
const (
	LogNone  = "none"
	LogFile  = "file"
	LogStore = "store"
)

// Server configures the public listener.
type Server struct {
	Name                string        `koanf:"name"`
	ReadTimeout         time.Duration `koanf:"read_timeout"`
	WriteTimeout        time.Duration `koanf:"write_timeout"`
	IdleTimeout         time.Duration `koanf:"idle_timeout"`
	MaxHeaderBytes      ByteSize      `koanf:"max_header_bytes"`
	MaxBodyBytes        ByteSize      `koanf:"max_body_bytes"`
	MaxConns            int           `koanf:"max_conns"`
	MaxInFlightAds      int           `koanf:"max_in_flight_ads"`
	MaxInFlightTracking int           `koanf:"max_in_flight_tracking"`
	MaxInFlightHook     int           `koanf:"max_in_flight_webhooks"`
	LimitWait           time.Duration `koanf:"limit_wait"`
	ShutdownTimeout     time.Duration `koanf:"shutdown_timeout"`
	DrainGrace          time.Duration `koanf:"drain_grace"`
	// HandoverCampaigns hands the campaign set to a restart's successor
	// (cmd/tsubame catalog.go).
	HandoverCampaigns bool `koanf:"handover_campaigns"`
	HelloJSON         bool `koanf:"hello_json"`
	// ExtraProcs are Go scheduler run queues beyond the CPUs the process
	// may use (see GOMAXPROCS in serveverb.go).
	ExtraProcs int `koanf:"extra_procs"`
	// TrustedProxies are CIDRs (or addresses) of the load balancers whose
	// X-Forwarded-For, Forwarded and PROXY headers name the client.
	TrustedProxies []string `koanf:"trusted_proxies"`
	ProxyProtocol  bool     `koanf:"proxy_protocol"`
}

// Options are the public listener's options this section sets (the
// caller adds the receivers, sites, readiness and logger).
func (s Server) Options() server.Options {
	trusted, _ := s.TrustedPrefixes() // checked by Validate
	if len(trusted) == 0 {
		trusted = nil
	}
	return server.Options{Name: s.Name, ReadTimeout: s.ReadTimeout, WriteTimeout: s.WriteTimeout, IdleTimeout: s.IdleTimeout,
		MaxHeaderBytes: int(s.MaxHeaderBytes), MaxBodyBytes: int(s.MaxBodyBytes), MaxConns: s.MaxConns,
		MaxInFlightAds: s.MaxInFlightAds, MaxInFlightTracking: s.MaxInFlightTracking, MaxInFlightHooks: s.MaxInFlightHook, LimitWait: s.LimitWait,
		HelloJSON: s.HelloJSON, TrustedProxies: trusted, ProxyProtocol: s.ProxyProtocol, DrainGrace: s.DrainGrace}
}

// TrustedPrefixes parses TrustedProxies (Validate reports bad ones).
func (s Server) TrustedPrefixes() ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(s.TrustedProxies))
	for _, v := range s.TrustedProxies {
		if a, err := netip.ParseAddr(v); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address or a CIDR such as 10.0.0.0/8", v)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Endpoint sources.
const (
	SourceFixed = "fixed"
	SourceStore = "store"
)

// ValidOrigin reports whether o is a serialized origin (RFC 6454 §6.2) as a
// browser sends it in Origin: http or https, a lower-case host, an optional
// port, nothing else.
func ValidOrigin(o string) bool {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, ":") {
		return false
	}
	return o == strings.ToLower(o) && o == u.Scheme+"://"+u.Host
}

// DefaultCacheControl is an endpoint's Cache-Control unless it sets one:
// every ad request must reach the server (and its access log), so no cache
// may keep a response.
const DefaultCacheControl = "no-store"

// ResponseCacheControl is the Cache-Control value e's responses carry;
// empty sends none.
func (e Endpoint) ResponseCacheControl() string {
	switch e.CacheControl {
	case "":
		return DefaultCacheControl
	case "none":
		return ""
	}
	return e.CacheControl
}

// Endpoint declares one /api/<name>.<ext> endpoint.
type Endpoint struct {
	Source       string   `koanf:"source"`
	URLs         []string `koanf:"urls"`
	Cache        bool     `koanf:"cache"`
	Formats      []string `koanf:"formats"`
	CacheControl string   `koanf:"cache_control"`
	AccessLog    string   `koanf:"access_log"`
	// CORSOrigins are the page origins allowed to read responses with
	// fetch() (https://pub.example), or ["*"] for any.
	CORSOrigins []string `koanf:"cors_origins"`
	// CORSMaxAge is how long a browser may reuse a preflight's answer.
	CORSMaxAge time.Duration `koanf:"cors_max_age"`
	// Template names a response template: .js answers with it instead of JSONP.
	Template string `koanf:"template"`
}

// UsesLog reports whether anything logs to the given destination: an
// endpoint, or (the file) the ads routes.
func (c *Config) UsesLog(dest string) bool {
	if dest == LogFile && c.Ads.Enabled { // /api/decide and the tracking URLs
		return true
	}
	for _, ep := range c.Endpoints {
		if ep.AccessLog == dest {
			return true
		}
	}
	for _, site := range c.Sites {
		for _, ep := range site.Endpoints {
			if ep.AccessLog == dest {
				return true
			}
		}
	}
	return false
}

// KafkaStatePath is access_log.kafka.state_file, or .kafka-ship.json in the
// access log's directory.
func (a AccessLog) KafkaStatePath() string {
	if a.Kafka.StateFile != "" {
		return a.Kafka.StateFile
	}
	return filepath.Join(a.Dir, ".kafka-ship.json")
}

// Resolved returns a copy with every path that an empty value derives
// (admin.dir, admin.socket, admin.audit_log, store.embedded.path, webhook.dead_letter,
// access_log.kafka.state_file) set to the path in use: what check-config
// -print shows.
func (c *Config) Resolved() Config {
	r := *c
	r.Admin.Dir, r.Admin.AuditLog = c.AdminDir(), c.AuditLogPath()
	if r.Admin.Socket != SocketOff {
		r.Admin.Socket = c.AdminSocketPath()
	}
	r.Store.Embedded.Path = c.StorePath()
	r.Webhook.DeadLetter = c.DeadLetterPath()
	r.AccessLog.Kafka.StateFile = c.AccessLog.KafkaStatePath()
	return r
}

// StorePath is the embedded store file: store.embedded.path, or tsubame.db
// in the data directory.
func (c *Config) StorePath() string {
	if c.Store.Embedded.Path != "" {
		return c.Store.Embedded.Path
	}
	return strings.TrimSuffix(c.DataDir, "/") + "/tsubame.db"
}

// Load builds the configuration from the defaults, the YAML file at path (if
// path is not empty) and the TSUBAME_* variables in environ (as os.Environ
// returns them). It returns warnings for TSUBAME_* variables it does not
// know, and an error for an unreadable file, an unknown key or a value of the
// wrong type. Call Validate on the result for the rules between values.
func Load(path string, environ []string) (*Config, []string, error) {
	k := koanf.New(".")
	if err := k.Load(rawbytes.Provider(DefaultsYAML), yaml.Parser()); err != nil {
		return nil, nil, fmt.Errorf("cannot parse built-in defaults: %w", err)
	}
	for _, d := range ModuleDefaults {
		if err := k.Load(rawbytes.Provider(d), yaml.Parser()); err != nil {
			return nil, nil, fmt.Errorf("cannot parse a module's built-in defaults: %w", err)
		}
	}
	if path != "" {
		f := koanf.New(".")
		if err := f.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, nil, fmt.Errorf("cannot read config file %q: %w", path, yamlError(path, err))
		}
		if f.Exists("endpoints") {
			k.Delete("endpoints") // a file's endpoints replace the default list
		}
		if err := k.Merge(f); err != nil {
			return nil, nil, fmt.Errorf("cannot merge config file %q: %w", path, err)
		}
	}
	warnings := applyEnv(k, environ)

	var cfg Config
	dc := &mapstructure.DecoderConfig{
		TagName:          "koanf",
		Result:           &cfg,
		ErrorUnused:      true,
		WeaklyTypedInput: true,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			durationHook,
			mapstructure.TextUnmarshallerHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
		),
	}
	var fieldErrs *FieldErrors
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{DecoderConfig: dc}); err != nil {
		fieldErrs = newFieldErrors(err)
	}
	normalize(k, "endpoints.", cfg.Endpoints)
	for name, site := range cfg.Sites {
		normalize(k, "sites."+name+".endpoints.", site.Endpoints)
		for i, h := range site.Hosts {
			site.Hosts[i] = strings.ToLower(h)
		}
	}
	if path != "" {
		cfg.lines = readLines(path)
	}
	if fieldErrs != nil {
		fieldErrs.Errs = cfg.lines.locate(fieldErrs.Errs)
		return &cfg, warnings, fieldErrs
	}
	return &cfg, warnings, nil
}

// LoadValid is Load then Validate: a configuration that breaks no rule, or
// one error listing every problem of either kind (values of the wrong type,
// unknown keys, broken rules) at once.
func LoadValid(path string, environ []string) (*Config, []string, error) {
	cfg, warnings, err := Load(path, environ)
	var fieldErrs *FieldErrors
	if err != nil && !errors.As(err, &fieldErrs) {
		return nil, warnings, err
	}
	errs := cfg.Validate()
	if fieldErrs != nil {
		errs = fieldErrs.With(errs)
	}
	errs = cfg.lines.locate(errs)
	if len(errs) > 0 {
		return nil, warnings, errors.New(JoinProblems("invalid configuration", errs))
	}
	return cfg, warnings, nil
}

// FieldErrors are the values Load could not take (of the wrong type, or
// under unknown keys), one per key. Load returns them with the rest of the
// configuration decoded, so that Validate's problems can be reported with
// them at once (With).
type FieldErrors struct {
	Errs []error
	keys map[string]bool
}

func (e *FieldErrors) Error() string { return JoinProblems("invalid configuration", e.Errs) }

// With returns these errors followed by errs (Validate's), leaving out
// those about a key that failed to decode (its value is zero, not the one
// given).
func (e *FieldErrors) With(errs []error) []error {
	out := slices.Clone(e.Errs)
next:
	for _, err := range errs {
		msg := err.Error()
		for key := range e.keys {
			if rest, ok := strings.CutPrefix(msg, key); ok && rest != "" && strings.ContainsRune(":, ", rune(rest[0])) {
				continue next
			}
		}
		out = append(out, err)
	}
	return out
}

// JoinProblems writes a list of problems under a title, one a line.
func JoinProblems(title string, errs []error) string {
	msg := fmt.Sprintf("%s (%d problem(s)):", title, len(errs))
	for _, e := range errs {
		msg += "\n  " + e.Error()
	}
	return msg
}

// newFieldErrors flattens the decoder's errors into one per key, each
// saying which key and what was wrong with its value.
func newFieldErrors(err error) *FieldErrors {
	fe := &FieldErrors{keys: map[string]bool{}}
	var walk func(error)
	walk = func(err error) {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				walk(e)
			}
			return
		}
		de, ok := err.(*mapstructure.DecodeError)
		if !ok {
			if u := errors.Unwrap(err); u != nil {
				walk(u) // the decoder's "decoding failed" wrapper
				return
			}
			fe.Errs = append(fe.Errs, err)
			return
		}
		inner := de.Unwrap()
		if _, nested := inner.(interface{ Unwrap() []error }); nested {
			walk(inner)
			return
		}
		if _, nested := inner.(*mapstructure.DecodeError); nested {
			walk(inner)
			return
		}
		key := de.Name()
		var pe *mapstructure.ParseError
		var ue *mapstructure.UnconvertibleTypeError
		msg := inner.Error()
		switch {
		case strings.HasPrefix(msg, "has invalid keys: "):
			names := strings.Split(strings.TrimPrefix(msg, "has invalid keys: "), ", ")
			fe.Errs = append(fe.Errs, unknownKeys(mapKey(key), names)...)
			return
		case errors.As(inner, &pe):
			msg = fmt.Sprintf("%q is not a valid %s", fmt.Sprint(pe.Value), pe.Expected.Type())
		case errors.As(inner, &ue):
			msg = fmt.Sprintf("%v is not a valid %s", ue.Value, ue.Expected.Type())
		}
		fe.keys[key] = true
		fe.Errs = append(fe.Errs, fmt.Errorf("%s: %s", key, msg))
	}
	walk(err)
	return fe
}

// durationHook decodes a duration from text ("300ms", "5s", "2m", "1h"),
// naming the value when it is not one.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[time.Duration]() || from.Kind() != reflect.String {
		return data, nil
	}
	d, err := time.ParseDuration(data.(string))
	if err != nil {
		return nil, fmt.Errorf("%q is not a duration (a number and a unit: 300ms, 5s, 2m, 1h)", data)
	}
	return d, nil
}

// DefaultCORSMaxAge is how long browsers may reuse a preflight's answer
// unless an endpoint sets cors_max_age (Chromium caps it at 2h).
const DefaultCORSMaxAge = 2 * time.Hour

// normalize applies the per-endpoint defaults: cache on for a store
// endpoint unless set, both formats, no access log (the file for a decide
// endpoint), a 2h preflight age.
func normalize(k *koanf.Koanf, prefix string, eps map[string]Endpoint) {
	for name, ep := range eps {
		if !k.Exists(prefix + name + ".cache") {
			ep.Cache = ep.Source == SourceStore
		}
		if len(ep.Formats) == 0 {
			ep.Formats = []string{"js", "json"}
		}
		if ep.AccessLog == "" {
			ep.AccessLog = LogNone
			if ep.Source == SourceDecide { // its decisions are the invoice
				ep.AccessLog = LogFile
			}
		}
		if !k.Exists(prefix + name + ".cors_max_age") {
			ep.CORSMaxAge = DefaultCORSMaxAge
		}
		eps[name] = ep
	}
}

// applyEnv sets every TSUBAME_* variable it knows onto k.
func applyEnv(k *koanf.Koanf, environ []string) []string {
	keys := EnvKeys()
	epFields := leafKeys(reflect.TypeFor[Endpoint](), "")
	var warnings []string
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) || name == EnvConfigFile || name == EnvInherit {
			continue
		}
		if key, ok := keys[name]; ok {
			_ = k.Set(key, val)
			continue
		}
		if rest, ok := strings.CutPrefix(name, EnvPrefix+"ENDPOINTS_"); ok {
			if ep, field, ok := splitEndpointVar(rest, epFields); ok {
				_ = k.Set("endpoints."+ep+"."+field, val)
				continue
			}
		}
		if rest, ok := strings.CutPrefix(name, EnvPrefix+"SITES_"); ok {
			if site, field, ok := splitEndpointVar(rest, []string{"hosts", "static_root", "tls_cert", "tls_key"}); ok {
				_ = k.Set("sites."+site+"."+field, val)
				continue
			}
		}
		warnings = append(warnings, fmt.Sprintf("unknown environment variable %s ignored", name))
	}
	sort.Strings(warnings)
	return warnings
}

// splitEndpointVar splits "SAMPLE3_CACHE_CONTROL" into ("sample3",
// "cache_control"), preferring the longest field name that matches.
func splitEndpointVar(rest string, fields []string) (name, field string, ok bool) {
	best := ""
	for _, f := range fields {
		suffix := "_" + strings.ToUpper(f)
		if strings.HasSuffix(rest, suffix) && len(rest) > len(suffix) && len(f) > len(best) {
			best = f
		}
	}
	if best == "" {
		return "", "", false
	}
	return strings.ToLower(strings.TrimSuffix(rest, "_"+strings.ToUpper(best))), best, true
}

// EnvKeys maps every environment variable the configuration reads to its key
// path: TSUBAME_ + the upper-cased path with "_" for ".", plus the short names
// of env tags. Endpoints are set with TSUBAME_ENDPOINTS_<NAME>_<FIELD>.
func EnvKeys() map[string]string {
	out := make(map[string]string)
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for f := range t.Fields() {
			tag := f.Tag.Get("koanf")
			if tag == "" || tag == "endpoints" || tag == "sites" || tag == "templates" || tag == "exchanges" || tag == "rates" ||
				tag == "demand" || tag == "placements" || tag == "publishers" {
				continue
			}
			path := prefix + tag
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]() {
				walk(f.Type, path+".")
				continue
			}
			out[EnvPrefix+strings.ToUpper(strings.ReplaceAll(path, ".", "_"))] = path
			if alias := f.Tag.Get("env"); alias != "" {
				out[alias] = path
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return out
}

func leafKeys(t reflect.Type, prefix string) []string {
	var out []string
	for f := range t.Fields() {
		if tag := f.Tag.Get("koanf"); tag != "" {
			out = append(out, prefix+tag)
		}
	}
	return out
}

// Validate reports every rule the configuration breaks, section by
// section.
func (c *Config) Validate() []error {
	var p problems
	c.validateListeners(&p)
	c.validateAdmin(p.add, p.positive)
	c.validateTLS(p.add)
	c.validateLog(&p)
	c.validateStore(&p)
	c.validateCache(&p)
	c.validateAccessLog(&p)
	c.validateKafka(p.add)
	c.validateVAST(p.add)
	c.validateWebhook(&p)
	c.validateStatic(&p)
	c.validateServer(&p)
	c.validateRouting(&p)
	c.validateAds(&p)
	c.validateRTB(&p)
	c.validateReport(&p)
	for _, e := range c.SSP.Validate(ssp.Env{Currency: c.Ads.Currency, AdsEnabled: c.Ads.Enabled, HasRate: func(cur string) bool {
		_, ok := c.RTB.Rates[cur]
		return ok
	}}) {
		p.add("%s", e)
	}
	return p.errs
}

// problems collects what Validate finds.
type problems struct{ errs []error }

// validateCORS checks cors_origins and cors_max_age under prefix.
func validateCORS(p *problems, prefix string, origins []string, maxAge time.Duration) {
	for _, o := range origins {
		if o == "*" {
			if len(origins) > 1 {
				p.add("%scors_origins: \"*\" allows every origin and must stand alone", prefix)
			}
			continue
		}
		if !ValidOrigin(o) {
			p.add("%scors_origins: %q is not an origin such as https://pub.example or http://localhost:8000 (scheme, host and port only, lower case)", prefix, o)
		}
	}
	if maxAge < 0 || maxAge > 24*time.Hour {
		p.add("%scors_max_age: must be between 0s and 24h", prefix)
	}
}

func (p *problems) add(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf(format, args...))
}

func (p *problems) addAll(errs []error) { p.errs = append(p.errs, errs...) }

// positive requires a positive duration.
func (p *problems) positive(key string, d time.Duration) {
	if d <= 0 {
		p.add("%s: must be a positive duration such as 1s (got %v)", key, d)
	}
}

// validateListeners checks listen, admin.listen and data_dir.
func (c *Config) validateListeners(p *problems) {
	if err := checkAddr(c.Listen); err != nil {
		p.add("listen: %v", err)
	}
	if c.Admin.Listen != "" {
		if err := checkAddr(c.Admin.Listen); err != nil {
			p.add("admin.listen: %v", err)
		} else if c.Admin.Listen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
			p.add("admin.listen: must differ from listen (%s)", c.Listen)
		}
	}
	if c.DataDir == "" {
		p.add("data_dir: must not be empty")
	}
}

// validateLog checks the process log.
func (c *Config) validateLog(p *problems) {
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		p.add("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		p.add("log.format: %q is not one of text, json", c.Log.Format)
	}
	if c.Log.RepeatInterval < 0 {
		p.add("log.repeat_interval: %v must not be negative", c.Log.RepeatInterval)
	}
}

// validateStore checks the store section.
func (c *Config) validateStore(p *problems) {
	switch c.Store.Type {
	case "embedded", "memory":
	case "redis":
		r := c.Store.Redis
		if len(r.Addrs) == 0 {
			p.add("store.redis.addrs: at least one host:port is needed")
		}
		for _, a := range r.Addrs {
			if err := checkAddr(a); err != nil {
				p.add("store.redis.addrs: %v", err)
			}
		}
		p.positive("store.redis.dial_timeout", r.DialTimeout)
		p.positive("store.redis.timeout", r.Timeout)
		if r.PoolSize <= 0 {
			p.add("store.redis.pool_size: must be positive")
		}
		if r.MaxFlushDelay < 0 || r.MaxFlushDelay > 10*time.Millisecond {
			p.add("store.redis.max_flush_delay: %v is not between 0 and 10ms", r.MaxFlushDelay)
		}
		if r.KeyPrefix == "" || !printableASCII(r.KeyPrefix) || strings.ContainsAny(r.KeyPrefix, " *?[]") {
			p.add("store.redis.key_prefix: %q must be printable ASCII without spaces or glob characters", r.KeyPrefix)
		}
		if r.TLSCAFile != "" && !r.TLS {
			p.add("store.redis.tls_ca_file: set store.redis.tls: true too")
		}
		if _, err := r.WaitCount(); err != nil {
			p.add("store.redis.wait_replicas: %v", err)
		}
		if r.WaitTimeout < time.Millisecond || r.WaitTimeout > 10*time.Second {
			p.add("store.redis.wait_timeout: %v is not between 1ms and 10s", r.WaitTimeout)
		}
	default:
		p.add("store.type: %q is not one of embedded, redis, memory", c.Store.Type)
	}
	p.positive("store.embedded.lock_timeout", c.Store.Embedded.LockTimeout)
	p.positive("store.probe_interval", c.Store.ProbeInterval)
}

// validateCache checks the cache section.
func (c *Config) validateCache(p *problems) {
	p.positive("cache.ttl", c.Cache.TTL)
	p.positive("cache.negative_ttl", c.Cache.NegativeTTL)
	p.positive("cache.retry_interval", c.Cache.RetryInterval)
	p.positive("cache.load_timeout", c.Cache.LoadTimeout)
	p.positive("cache.breaker_cooldown", c.Cache.BreakerCooldown)
	if c.Cache.BreakerFailures == 0 {
		p.add("cache.breaker_failures: must be positive, or -1 to disable the breaker")
	}
	if c.Cache.StaleIfError < 0 {
		p.add("cache.stale_if_error: must not be negative")
	}
	if c.Cache.MaxBytes < 1<<20 {
		p.add("cache.max_bytes: must be at least 1MiB (got %v)", c.Cache.MaxBytes)
	}
	if c.Cache.MaxLoads <= 0 {
		p.add("cache.max_loads: must be positive")
	}
	p.positive("cache.load_wait", c.Cache.LoadWait)
	if c.Cache.WarmIDs < 0 {
		p.add("cache.warm_ids: must not be negative (0 disables)")
	}
	p.positive("cache.warm_timeout", c.Cache.WarmTimeout)
}

// validateAccessLog checks the access log (its Kafka shipper: validateKafka).
func (c *Config) validateAccessLog(p *problems) {
	al := c.AccessLog
	if al.Dir == "" {
		p.add("access_log.dir: must not be empty")
	}
	if _, ok := accesslog.ParseFormat(al.Format); !ok {
		p.add("access_log.format: %q is not one of ltsv, json", al.Format)
	}
	if al.FileName == "" || strings.ContainsAny(al.FileName, "/\\") || strings.HasPrefix(al.FileName, ".") {
		p.add("access_log.file_name: %q must be a plain file name not starting with a dot", al.FileName)
	}
	if al.RotateEvery < 0 || (al.RotateEvery > 0 && al.RotateEvery < time.Second) {
		p.add("access_log.rotate_every: must be 0 (off) or at least 1s (got %v)", al.RotateEvery)
	}
	if al.MaxSize != 0 && al.MaxSize < 64<<10 {
		p.add("access_log.max_size: must be 0 (off) or at least 64KiB (got %v)", al.MaxSize)
	}
	if len(al.OnClose) > 0 && al.OnClose[0] == "" {
		p.add("access_log.on_close: the command must not be empty")
	}
	if al.KeepFiles < 0 || al.KeepDays < 0 {
		p.add("access_log.keep_files and keep_days: must not be negative")
	}
	p.positive("access_log.flush_interval", al.FlushInterval)
	p.positive("access_log.max_wait", al.MaxWait)
	if al.BufferBytes < 64<<10 {
		p.add("access_log.buffer_bytes: must be at least 64KiB (got %v)", al.BufferBytes)
	}
	if al.Durability != "process" && al.Durability != "async" && al.Durability != "sync" {
		p.add("access_log.durability: %q is not one of process, sync, async", al.Durability)
	}
	if al.StoreCompression != "s2" && al.StoreCompression != "none" {
		p.add("access_log.store_compression: %q is not one of s2, none", al.StoreCompression)
	}
}

// validateWebhook checks the webhook section.
func (c *Config) validateWebhook(p *problems) {
	wh := c.Webhook
	if wh.MaxBodyBytes < 1<<10 || wh.MaxBodyBytes > 64<<20 {
		p.add("webhook.max_body_bytes: must be between 1KiB and 64MiB (got %v)", wh.MaxBodyBytes)
	}
	if wh.QueueSize <= 0 || wh.DedupeMax <= 0 || wh.StoreConcurrency <= 0 {
		p.add("webhook.queue_size, dedupe_max and store_concurrency: must be positive")
	}
	if wh.MaxInFlight < 0 || wh.API.MaxConns < 0 {
		p.add("webhook.max_in_flight and webhook.api.max_conns: must not be negative (0: chosen by the API's protocol)")
	}
	p.positive("webhook.dedupe_window", wh.DedupeWindow)
	p.positive("webhook.drain_timeout", wh.DrainTimeout)
	if u := wh.API.URL; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			p.add("webhook.api.url: %q is not an absolute http or https URL", u)
		}
	}
	p.positive("webhook.api.timeout", wh.API.Timeout)
	p.positive("webhook.api.backoff", wh.API.Backoff)
	if wh.API.MaxBackoff < wh.API.Backoff {
		p.add("webhook.api.max_backoff: must be at least webhook.api.backoff")
	}
	if wh.API.Retries < 0 || wh.API.Retries > 20 {
		p.add("webhook.api.retries: must be between 0 and 20")
	}
	if !printableASCII(wh.API.Token) || !printableASCII(wh.LINE.ChannelSecret) ||
		!printableASCII(wh.Slack.SigningSecret) || !printableASCII(wh.Slack.BotToken) {
		p.add("webhook.api.token, webhook.line.channel_secret, webhook.slack.signing_secret and bot_token: must be printable ASCII")
	}
	if wh.Slack.SigningSecret != "" && wh.Slack.BotToken == "" {
		p.add("webhook.slack.bot_token: required with webhook.slack.signing_secret (TSUBAME_SLACK_BOT_TOKEN): messages are answered with it")
	}
	if u := wh.Slack.APIURL; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || pu.User != nil {
			p.add("webhook.slack.api_url: %q is not an absolute http or https URL", u)
		}
	}
	if t := wh.CallbackToken; t != "" && (len(t) < MinCallbackToken || !printableASCII(t) || strings.ContainsAny(t, " \t")) {
		p.add("webhook.callback_token: must be at least %d printable ASCII characters without spaces (make one with: openssl rand -hex 32)", MinCallbackToken)
	}
}

// validateStatic checks the static section.
func (c *Config) validateStatic(p *problems) {
	if st := c.Static; st.Root != "" {
		if fi, err := os.Stat(st.Root); err != nil || !fi.IsDir() {
			p.add("static.root: %q is not a directory", st.Root)
		}
		if st.MaxFiles <= 0 || st.MaxBytes <= 0 || st.CacheBytes < st.MaxBytes {
			p.add("static: max_files and max_bytes must be positive, and cache_bytes at least max_bytes")
		}
	}
}

// validateServer checks the server section.
func (c *Config) validateServer(p *problems) {
	if c.Server.ExtraProcs < 0 || c.Server.ExtraProcs > 64 {
		p.add("server.extra_procs: must be from 0 to 64 (got %d)", c.Server.ExtraProcs)
	}
	p.positive("server.read_timeout", c.Server.ReadTimeout)
	p.positive("server.write_timeout", c.Server.WriteTimeout)
	p.positive("server.idle_timeout", c.Server.IdleTimeout)
	p.positive("server.shutdown_timeout", c.Server.ShutdownTimeout)
	p.positive("server.drain_grace", c.Server.DrainGrace)
	if c.Server.DrainGrace >= c.Server.ShutdownTimeout && c.Server.ShutdownTimeout > 0 {
		p.add("server.drain_grace: must be shorter than server.shutdown_timeout (got %v and %v)", c.Server.DrainGrace, c.Server.ShutdownTimeout)
	}
	if c.Server.MaxHeaderBytes < 1<<10 || c.Server.MaxHeaderBytes > 1<<20 {
		p.add("server.max_header_bytes: must be between 1KiB and 1MiB (got %v)", c.Server.MaxHeaderBytes)
	}
	if c.Server.MaxBodyBytes > 1<<30 {
		p.add("server.max_body_bytes: must be at most 1GiB (got %v)", c.Server.MaxBodyBytes)
	}
	if c.Server.MaxConns <= 0 {
		p.add("server.max_conns: must be positive")
	}
	if _, err := c.Server.TrustedPrefixes(); err != nil {
		p.add("server.trusted_proxies: %v", err)
	}
	if c.Server.ProxyProtocol && len(c.Server.TrustedProxies) == 0 {
		p.add("server.proxy_protocol: PROXY headers are read from trusted peers only; list them in server.trusted_proxies")
	}
	if c.Server.MaxInFlightAds < 0 || c.Server.MaxInFlightTracking < 0 || c.Server.MaxInFlightHook < 0 {
		p.add("server.max_in_flight_ads, max_in_flight_tracking and max_in_flight_webhooks: must not be negative (0: no bound)")
	}
	if c.Server.LimitWait < 0 {
		p.add("server.limit_wait: must not be negative")
	}
	if !printableASCII(c.Server.Name) {
		p.add("server.name: must be printable ASCII")
	}
}

// validateRouting checks the endpoints, templates and sites.
func (c *Config) validateRouting(p *problems) {
	p.addAll(validateEndpoints("endpoints", c.Endpoints))
	p.addAll(c.validateTemplates("", "templates", c.Templates, c.Endpoints, "endpoints"))
	if c.UnknownHosts != "default" && c.UnknownHosts != "reject" {
		p.add("unknown_hosts: %q is not one of default, reject", c.UnknownHosts)
	}
	owner := map[string]string{}
	for _, name := range sortedKeys(c.Sites) {
		site := c.Sites[name]
		if !validEndpointName(name) {
			p.add("sites: name %q must be 1 to 64 characters of a-z, 0-9, '-' and '_'", name)
		}
		if len(site.Hosts) == 0 {
			p.add("sites.%s.hosts: a site needs at least one host name", name)
		}
		for _, h := range site.Hosts {
			if !validHostPattern(h) {
				p.add("sites.%s.hosts: %q is not a host name or *.domain pattern", name, h)
			} else if other, dup := owner[h]; dup {
				p.add("sites.%s.hosts: %q is already a host of site %s", name, h, other)
			}
			owner[h] = name
		}
		if site.StaticRoot != "" {
			if fi, err := os.Stat(site.StaticRoot); err != nil || !fi.IsDir() {
				p.add("sites.%s.static_root: %q is not a directory", name, site.StaticRoot)
			}
		}
		p.addAll(validateEndpoints("sites."+name+".endpoints", site.Endpoints))
		p.addAll(c.validateTemplates(name, "sites."+name+".templates", site.Templates, site.Endpoints, "sites."+name+".endpoints"))
	}
}

// validateTLS checks the TLS listener and loads its certificates, so that
// a bad file is reported by tsubame check-config and keeps a reload from
// applying.
func (c *Config) validateTLS(add func(string, ...any)) {
	t := c.TLS
	if _, err := certs.MinVersion(t.MinVersion); err != nil {
		add("tls.min_version: %v", err)
	}
	if t.HSTS < 0 || (t.HSTS > 0 && t.HSTS < time.Second) {
		add("tls.hsts: must be 0 (no header) or at least 1s (got %v)", t.HSTS)
	}
	if t.HSTS > 0 && t.Listen == "" {
		add("tls.hsts: Strict-Transport-Security is sent over TLS only: set tls.listen")
	}
	def, sites := c.TLSCertificates()
	if t.Listen == "" {
		if !def.Empty() || len(sites) > 0 {
			add("tls.listen: certificates are configured but no TLS listener: set tls.listen (e.g. \":4443\")")
		}
		return
	}
	if err := checkAddr(t.Listen); err != nil {
		add("tls.listen: %v", err)
		return
	}
	for key, other := range map[string]string{"listen": c.Listen, "admin.listen": c.Admin.Listen} {
		if other != "" && t.Listen == other && !strings.HasSuffix(other, ":0") {
			add("tls.listen: must differ from %s (%s)", key, other)
		}
	}
	if err := new(certs.Store).Load(def, sites); err != nil {
		add("%v", err)
	}
}

// validateTemplates compiles own (the templates declared at prefix) and
// checks that every endpoint's template exists for its site.
func (c *Config) validateTemplates(site, prefix string, own map[string]Template, eps map[string]Endpoint, epPrefix string) []error {
	var errs []error
	for _, name := range sortedKeys(own) {
		t := own[name]
		if (t.File == "") == (t.Text == "") {
			errs = append(errs, fmt.Errorf("%s.%s: give exactly one of file and text", prefix, name))
			continue
		}
		text, err := t.Source()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.%s: %v", prefix, name, err))
			continue
		}
		if _, err := render.CompileTemplate(name, text); err != nil {
			errs = append(errs, fmt.Errorf("%s.%s: %v", prefix, name, err))
		}
	}
	visible := c.TemplatesFor(site)
	for _, name := range sortedKeys(eps) {
		if tn := eps[name].Template; tn != "" {
			if _, ok := visible[tn]; !ok {
				errs = append(errs, fmt.Errorf("%s.%s.template: no template named %q", epPrefix, name, tn))
			}
		}
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func validateEndpoints(prefix string, eps map[string]Endpoint) []error {
	var errs []error
	for _, name := range sortedKeys(eps) {
		errs = append(errs, eps[name].validate(prefix, name)...)
	}
	return errs
}

// validHostPattern accepts a lower-case host name, or *. followed by one.
func validHostPattern(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 || strings.HasPrefix(h, ".") || strings.HasSuffix(h, ".") || strings.Contains(h, "..") {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func (e Endpoint) validate(prefix, name string) []error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: "+format, append([]any{prefix, name}, args...)...))
	}
	if !validEndpointName(name) {
		errs = append(errs, fmt.Errorf("%s: name %q must be 1 to 64 characters of a-z, 0-9, '-' and '_'", prefix, name))
	}
	switch e.Source {
	case SourceFixed:
		p := tsubame.Placement{ID: "fixed", URLs: e.URLs}
		if err := p.Validate(); err != nil {
			add("urls: %s", strings.TrimPrefix(tsubame.ErrorMessage(err), `placement "fixed" `))
		}
		if e.Cache {
			add("cache: a fixed endpoint has nothing to cache")
		}
	case SourceStore:
		if len(e.URLs) > 0 {
			add("urls: only a fixed endpoint takes urls")
		}
	case SourceDecide:
		if len(e.URLs) > 0 {
			add("urls: only a fixed endpoint takes urls")
		}
		if e.Cache {
			add("cache: a decide endpoint decides per request; there is nothing to cache")
		}
		if e.Template != "" {
			add("template: a decide endpoint answers its decisions, not a template")
		}
		if e.AccessLog == LogNone {
			add("access_log: a decide endpoint's decisions are the invoice: file or store, not none")
		}
	default:
		add("source: %q is not one of fixed, store, decide", e.Source)
	}
	var cp problems
	validateCORS(&cp, "", e.CORSOrigins, e.CORSMaxAge)
	for _, err := range cp.errs {
		add("%s", err)
	}
	for _, f := range e.Formats {
		if _, ok := render.ParseFormat([]byte(f)); !ok {
			add("formats: %q is not one of %s", f, strings.Join(render.FormatNames(), ", "))
		}
	}
	if !printableASCII(e.CacheControl) {
		add("cache_control: must be printable ASCII")
	}
	switch e.AccessLog {
	case LogNone, LogFile, LogStore:
	default:
		add("access_log: %q is not one of none, file, store", e.AccessLog)
	}
	return errs
}

func validEndpointName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Risks lists settings that are valid but unsafe, for a warning at start
// and from check-config.
func (c *Config) Risks() []string {
	var out []string
	if c.plaintextAdmin() {
		out = append(out, fmt.Sprintf("admin.listen %q is reachable from the network without TLS (admin.allow_plaintext): "+
			"passwords, session cookies and API tokens cross it in clear text; set admin.tls_cert and admin.tls_key", c.Admin.Listen))
	}
	if names := c.onlySiteCertificates(); len(names) > 0 {
		out = append(out, fmt.Sprintf("tls.listen %q has no default certificate (tls.cert and tls.key): a client that sends no server name "+
			"(SNI: one that connects to an IP address, some health checks and old clients) fails its TLS handshake with an "+
			"internal_error alert, and so does one asking for a name no site's tls_cert covers (they cover %s); "+
			"set tls.cert and tls.key to the pair those clients should get", c.TLS.Listen, strings.Join(names, ", ")))
	}
	return out
}

// onlySiteCertificates returns the host names the sites' certificates
// cover when the TLS listener has no default pair to present to the
// others (certs.Store.Certificate), else nil. Without any pair Validate
// refuses the configuration instead.
func (c *Config) onlySiteCertificates() []string {
	def, sites := c.TLSCertificates()
	if c.TLS.Listen == "" || !def.Empty() {
		return nil
	}
	var names []string
	for _, st := range sites {
		names = append(names, st.Hosts...)
	}
	return names
}

// plaintextAdmin reports whether the admin listener is reachable beyond
// loopback without TLS.
func (c *Config) plaintextAdmin() bool {
	a := c.Admin.Listen
	return a != "" && c.Admin.TLSCert == "" && !loopbackAddr(a)
}

// loopbackAddr reports whether host:port listens on loopback only.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func checkAddr(addr string) error {
	if addr == "" {
		return errors.New("must not be empty")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if port == "" {
		return fmt.Errorf("%q has no port", addr)
	}
	return nil
}

func (c *Config) validateVAST(add func(string, ...any)) {
	v := c.VAST
	if v.AdSystem == "" || len(v.AdSystem) > 64 || !printableASCII(v.AdSystem) {
		add("vast.ad_system: must be 1 to 64 printable ASCII characters")
	}
	if v.ImpressionURL != "" {
		u, err := url.Parse(strings.ReplaceAll(v.ImpressionURL, "{id}", "1"))
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || !printableASCII(v.ImpressionURL) {
			add("vast.impression_url: %q must be an http:// or https:// URL ({id}: the placement id)", v.ImpressionURL)
		}
	}
}

func (c *Config) validateAdmin(add func(string, ...any), positive func(string, time.Duration)) {
	a := &c.Admin
	if (a.TLSCert == "") != (a.TLSKey == "") {
		add("admin.tls_cert and admin.tls_key: give both or neither")
	}
	positive("admin.session_idle", a.SessionIdle)
	positive("admin.session_max", a.SessionMax)
	positive("admin.login_max_delay", a.LoginMaxDelay)
	positive("admin.alert_window", a.AlertWindow)
	if c.plaintextAdmin() && !a.AllowPlaintext {
		add("admin.listen: %q is reachable from the network without TLS: passwords, session cookies and tokens would cross it "+
			"in clear text; set admin.tls_cert and admin.tls_key, listen on a loopback address, or set admin.allow_plaintext: true "+
			"for a private network you trust", a.Listen)
	}
	if path := c.AdminSocketPath(); len(path) > admin.MaxSocketPath {
		add("admin.socket: %q is %d bytes, and a Unix socket's path may have at most %d: set admin.socket to a shorter path "+
			"(or off), or use a shorter admin.dir or data_dir", path, len(path), admin.MaxSocketPath)
	} else if strings.ContainsRune(path, 0) {
		add("admin.socket: must not contain a NUL byte")
	}
	if a.MaxTokenTTL < 0 {
		add("admin.max_token_ttl: %v must not be negative", a.MaxTokenTTL)
	}
	for _, h := range a.Hosts {
		if !admin.ValidHostName(h) {
			add("admin.hosts: %q is not a host name or IP address (no port, scheme or wildcard)", h)
		}
	}
	if a.AlertWebhook != "" {
		if u, err := url.Parse(a.AlertWebhook); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
			add("admin.alert_webhook: must be an https:// URL with a host")
		}
	}
	if a.AuditRepeatInterval < 0 {
		add("admin.audit_repeat_interval: %v must not be negative", a.AuditRepeatInterval)
	}
	if a.AuditMaxSize != 0 && a.AuditMaxSize < 64<<10 {
		add("admin.audit_max_size: must be 0 (off) or at least 64KiB (got %v)", a.AuditMaxSize)
	}
	if a.AuditRotateEvery < 0 || (a.AuditRotateEvery > 0 && a.AuditRotateEvery < time.Second) {
		add("admin.audit_rotate_every: must be 0 (off) or at least 1s (got %v)", a.AuditRotateEvery)
	}
	if a.AuditKeepFiles < 0 {
		add("admin.audit_keep_files: must not be negative (got %d)", a.AuditKeepFiles)
	}
	if a.AuditSyslog != "" {
		network, _, err := admin.ParseSyslogAddress(a.AuditSyslog)
		if err != nil {
			add("admin.audit_syslog: %q %v", a.AuditSyslog, err)
		} else if a.AuditSyslogCAFile != "" && network != "tls" {
			add("admin.audit_syslog_ca_file: only for a tls:// admin.audit_syslog")
		}
	}
	if _, ok := admin.SyslogFacilities[a.AuditSyslogFacility]; !ok {
		add("admin.audit_syslog_facility: %q is not a syslog facility (auth, authpriv, daemon, local0 to local7, ...)", a.AuditSyslogFacility)
	}
	if a.SessionIdle > a.SessionMax {
		add("admin.session_idle: must not exceed admin.session_max (%v)", a.SessionMax)
	}
	if a.MinPasswordLength < 8 || a.MinPasswordLength > 64 {
		add("admin.min_password_length: must be between 8 and 64 (got %d)", a.MinPasswordLength)
	}
	if a.MinPasswordScore < 0 || a.MinPasswordScore > 4 {
		add("admin.min_password_score: must be between 0 and 4 (got %d)", a.MinPasswordScore)
	}
	if a.LoginFreeFailures < 1 {
		add("admin.login_free_failures: must be at least 1 (got %d)", a.LoginFreeFailures)
	}
	if a.LoginPerMinute < 1 {
		add("admin.login_per_minute: must be at least 1 (got %d)", a.LoginPerMinute)
	}
	if a.MaxImportBytes < 1 {
		add("admin.max_import_bytes: must be positive")
	}
	if a.AlertFailures < 1 {
		add("admin.alert_failures: must be at least 1 (got %d)", a.AlertFailures)
	}
}

// ByteSize is a size in bytes written with a unit ("64KiB"): units.ByteSize.
type ByteSize = units.ByteSize
