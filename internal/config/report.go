package config

import (
	"path/filepath"
	"strings"
	"time"
)

// Report configures the reports (internal/report): rollups of the access
// log's event lines, in ReportPath.
type Report struct {
	// Enabled rolls the file access log up while the server runs (when
	// the file access log is written); the report command rolls up what is
	// left when it runs without a server.
	Enabled bool `koanf:"enabled"`
	// Interval is how often the files are read for new lines.
	Interval time.Duration `koanf:"interval"`
	// CommitEvery is how long what was read waits in memory before it is
	// committed with its read position (the reports' lag).
	CommitEvery time.Duration `koanf:"commit_every"`
	// Burst is how long the background reading works at a stretch before
	// it pauses as long as it worked (report.Options.Burst); 0: no pauses.
	Burst time.Duration `koanf:"burst"`
	// Minutes is how long rows are kept per minute; older ones are kept
	// per quarter-hour (which the hours and days of every zone are made of).
	Minutes time.Duration `koanf:"minutes"`
	// Timezone is the IANA zone of hours and days when a report names none.
	Timezone string `koanf:"timezone"`
	// Node names this server in the reports (the node dimension) and, on
	// Redis, its read positions; empty: the host name. Keep it stable
	// across restarts of a node that keeps its access log.
	Node string `koanf:"node"`
	// ForecastDays is the whole days of traffic a forecast learns from
	// (GET /api/v1/forecast, tsubame forecast).
	ForecastDays int `koanf:"forecast_days"`
}

// ReportPath is the reports database's file.
func (c *Config) ReportPath() string { return filepath.Join(c.DataDir, "reports.db") }

// ReportLocation is report.timezone loaded (UTC if it does not load; Validate
// says so).
func (c *Config) ReportLocation() *time.Location {
	loc, err := time.LoadLocation(c.Report.Timezone)
	if err != nil {
		return time.UTC
	}
	return loc
}

func (c *Config) validateReport(p *problems) {
	r := c.Report
	p.positive("report.interval", r.Interval)
	p.positive("report.commit_every", r.CommitEvery)
	if r.Burst < 0 || r.Burst > 50*time.Millisecond {
		p.add("report.burst: must be between 0 (no pauses) and 50ms (got %v)", r.Burst)
	}
	if r.ForecastDays < 1 || r.ForecastDays > 56 {
		p.add("report.forecast_days: must be 1 to 56 (got %d)", r.ForecastDays)
	}
	if r.Minutes < time.Hour {
		p.add("report.minutes: must be at least 1h (got %v)", r.Minutes)
	}
	if len(r.Node) > 64 || strings.ContainsAny(r.Node, " \t\r\n:") {
		p.add("report.node: %q must be at most 64 characters, without spaces or ':'", r.Node)
	}
	if _, err := time.LoadLocation(r.Timezone); err != nil || r.Timezone == "" || r.Timezone == "Local" {
		p.add("report.timezone: %q is not an IANA time zone such as Asia/Tokyo or UTC", r.Timezone)
	}
}
