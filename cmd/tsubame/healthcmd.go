package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// healthFlags are the flags of "tsubame health".
type healthFlags struct {
	url     string
	live    bool
	timeout time.Duration
}

// runHealth implements "tsubame health": GET /readyz (or /healthz) of the
// public listener and succeed on a 200. It is what a container's health
// check runs (the image has no shell and no curl).
func runHealth(ctx context.Context, e *env, f *healthFlags) error {
	path, want := "/readyz", "ready"
	if f.live {
		path, want = "/healthz", "ok"
	}
	target := f.url
	if target == "" {
		cfg, err := e.load()
		if err != nil {
			return err
		}
		if target, err = localURL(cfg.Listen, path); err != nil {
			return usagef("listen: %v", err)
		}
	} else {
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return usagef("-url %q: want http://HOST:PORT or https://HOST:PORT (the public listener)", target)
		}
		switch u.Path {
		case "", "/":
			u.Path = path
		case "/readyz", "/healthz":
			if u.Path != path {
				return usagef("-url %q asks %s: give the listener's address alone (-live asks /healthz)", target, u.Path)
			}
		default:
			return usagef("-url %q: give the public listener's address alone; health asks %s there", target, path)
		}
		target = u.String()
	}
	if f.timeout <= 0 {
		return usagef("-timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "tsubame-health/"+version)
	client := &http.Client{
		// The server is asked directly: no proxy of the environment's
		// HTTP_PROXY, and a redirect is not followed.
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	text := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", target, quoteText(resp.Status), quoteText(text))
	}
	// Any 200 is not enough: another server on that port (the admin
	// listener's dashboard, a proxy's page) would pass.
	if text != want {
		return fmt.Errorf("%s: 200 OK, but %q is not a tsubame server's answer (%q): is this the public listener?", target, quoteText(text), want)
	}
	fmt.Fprintf(e.stdout, "%s: %s\n", target, quoteText(text))
	return nil
}

// localURL is the URL of path on a listener's address, asked from this
// machine.
func localURL(addr, path string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	// A listener on every interface ("[::]" too: Go's are dual-stack)
	// answers on IPv4's loopback, which every container has.
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: path}).String(), nil
}

// quoteText shows a short answer as it is, and quotes one with control
// characters or of more than a line.
func quoteText(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}
