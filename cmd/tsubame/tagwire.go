package main

import (
	"net"
	"slices"
	"strings"

	"tsubame/internal/admin"
	"tsubame/internal/config"
)

// tagSetup tells the dashboard's ad tag snippets where the public listener
// answers and what it serves: the default site's store endpoints that
// answer .js as JSONP (those writing the file access log first, then by
// name), and /api/decide with its CORS origins.
func (m *Main) tagSetup() admin.TagSetup {
	m.mu.Lock()
	cfg := m.Config
	m.mu.Unlock()
	var out admin.TagSetup
	if m.pub.ln != nil {
		_, out.PublicPort, _ = net.SplitHostPort(m.pub.ln.Addr().String())
	}
	if cfg == nil {
		return out
	}
	out.BaseURL = cfg.Ads.Tracking.URL
	out.Decide = cfg.Ads.Enabled
	out.CORSOrigins = slices.Clone(cfg.Ads.CORSOrigins)
	for name, ep := range cfg.Endpoints {
		if ep.Source == config.SourceStore && ep.Template == "" && slices.Contains(ep.Formats, "js") {
			out.Script = append(out.Script, name)
		}
	}
	logged := func(name string) int {
		if cfg.Endpoints[name].AccessLog == config.LogFile {
			return 0
		}
		return 1
	}
	slices.SortFunc(out.Script, func(a, b string) int {
		if d := logged(a) - logged(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return out
}
