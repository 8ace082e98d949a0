package server_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"tsubame/internal/accesslog"
	"tsubame/internal/server"
)

// clientLog runs a logged endpoint behind trusted proxy 127.0.0.1 and
// returns its address and a function that closes the log and returns its
// lines.
func clientLog(t *testing.T, proxyProtocol bool) (string, func() []string) {
	t.Helper()
	alog, lines := memoryLog(t)
	_, addr := startWith(t, server.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")},
		ProxyProtocol: proxyProtocol}, server.Endpoint{Name: "e", Source: server.Fixed(`{"urls":[]}`), Log: alog})
	return addr, lines
}

// memoryLog is an access log kept in memory, and a function that closes it
// and returns its lines.
func memoryLog(t *testing.T) (*accesslog.Logger, func() []string) {
	sink := &lineSink{}
	alog := accesslog.New(sink, accesslog.Options{})
	return alog, func() []string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := alog.Close(ctx); err != nil {
			t.Fatal(err)
		}
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return append([]string(nil), sink.lines...)
	}
}

// sendFrom sends raw on a connection from the local address src and
// returns the status of the answer.
func sendFrom(t *testing.T, src, addr, raw string) int {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func get(id string, headers ...string) string {
	return "GET /api/e.json?id=" + id + " HTTP/1.1\r\nHost: x\r\n" + strings.Join(headers, "") + "\r\n"
}

// checkHosts finds each id's record and checks its host and peer fields.
func checkHosts(t *testing.T, lines []string, want map[string][2]string) {
	t.Helper()
	for id, hp := range want {
		var line string
		for _, l := range lines {
			if strings.Contains(l, "\tid:"+id+"\t") {
				line = l
			}
		}
		wantHost := "\thost:" + hp[0] + "\t"
		if line == "" || !strings.Contains(line, wantHost) {
			t.Errorf("id %s: want %q in %q", id, wantHost, line)
			continue
		}
		if hp[1] == "" && strings.Contains(line, "\tpeer:") {
			t.Errorf("id %s: a peer logged though it is the client: %q", id, line)
		}
		if hp[1] != "" && !strings.Contains(line, "\thost:"+hp[0]+"\tpeer:"+hp[1]+"\t") {
			t.Errorf("id %s: want peer %s in %q", id, hp[1], line)
		}
	}
}

func TestClientAddressFromForwardingHeaders(t *testing.T) {
	addr, lines := clientLog(t, false)
	cases := map[string]struct {
		src     string
		headers []string
		host    [2]string
	}{
		"plain":            {"127.0.0.1", nil, [2]string{"127.0.0.1", ""}},
		"xff":              {"127.0.0.1", []string{"X-Forwarded-For: 203.0.113.9\r\n"}, [2]string{"203.0.113.9", "127.0.0.1"}},
		"xff-spoofed":      {"127.0.0.1", []string{"X-Forwarded-For: 6.6.6.6, 203.0.113.9\r\n"}, [2]string{"203.0.113.9", "127.0.0.1"}},
		"xff-chain":        {"127.0.0.1", []string{"X-Forwarded-For: 6.6.6.6, 198.51.100.4, 10.1.2.3\r\n"}, [2]string{"198.51.100.4", "127.0.0.1"}},
		"xff-two-headers":  {"127.0.0.1", []string{"X-Forwarded-For: 6.6.6.6\r\n", "X-Forwarded-For: 198.51.100.5, 10.0.0.1\r\n"}, [2]string{"198.51.100.5", "127.0.0.1"}},
		"xff-across":       {"127.0.0.1", []string{"X-Forwarded-For: 198.51.100.6\r\n", "X-Forwarded-For: 10.0.0.2\r\n"}, [2]string{"198.51.100.6", "127.0.0.1"}},
		"xff-all-trusted":  {"127.0.0.1", []string{"X-Forwarded-For: 10.9.9.9, 10.0.0.1\r\n"}, [2]string{"10.9.9.9", "127.0.0.1"}},
		"xff-garbage":      {"127.0.0.1", []string{"X-Forwarded-For: <script>, 10.0.0.7\r\n"}, [2]string{"10.0.0.7", "127.0.0.1"}},
		"xff-port":         {"127.0.0.1", []string{"X-Forwarded-For: 203.0.113.10:5555\r\n"}, [2]string{"203.0.113.10", "127.0.0.1"}},
		"xff-v6":           {"127.0.0.1", []string{"X-Forwarded-For: 2001:db8::7\r\n"}, [2]string{"2001:db8::7", "127.0.0.1"}},
		"forwarded":        {"127.0.0.1", []string{"Forwarded: for=192.0.2.60;proto=https;by=10.0.0.1\r\n"}, [2]string{"192.0.2.60", "127.0.0.1"}},
		"forwarded-v6":     {"127.0.0.1", []string{"Forwarded: for=6.6.6.6, For=\"[2001:db8:cafe::17]:4711\"\r\n"}, [2]string{"2001:db8:cafe::17", "127.0.0.1"}},
		"forwarded-unkn":   {"127.0.0.1", []string{"Forwarded: for=unknown\r\n"}, [2]string{"127.0.0.1", ""}},
		"xff-over-fwd":     {"127.0.0.1", []string{"Forwarded: for=192.0.2.61\r\n", "X-Forwarded-For: 192.0.2.62\r\n"}, [2]string{"192.0.2.62", "127.0.0.1"}},
		"untrusted-xff":    {"127.0.0.3", []string{"X-Forwarded-For: 203.0.113.9\r\n"}, [2]string{"127.0.0.3", ""}},
		"untrusted-fwd":    {"127.0.0.3", []string{"Forwarded: for=203.0.113.9\r\n"}, [2]string{"127.0.0.3", ""}},
		"untrusted-no-hdr": {"127.0.0.3", nil, [2]string{"127.0.0.3", ""}},
	}
	want := map[string][2]string{}
	for id, c := range cases {
		if code := sendFrom(t, c.src, addr, get(id, c.headers...)); code != 200 {
			t.Fatalf("%s: %d", id, code)
		}
		want[id] = c.host
	}
	checkHosts(t, lines(), want)
}

func TestClientAddressFromProxyProtocol(t *testing.T) {
	addr, lines := clientLog(t, true)
	v1 := "PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\r\n"
	header := proxyproto.HeaderProxyFromAddrs(2, &net.TCPAddr{IP: net.ParseIP("2001:db8::42"), Port: 1234}, &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 80})
	v2, err := header.Format()
	if err != nil {
		t.Fatal(err)
	}
	for id, raw := range map[string]string{
		"v1":          v1 + get("v1"),
		"v2":          string(v2) + get("v2"),
		"none":        get("none"),
		"v1-then-xff": "PROXY TCP4 10.2.2.2 10.0.0.1 5555 80\r\n" + get("v1-then-xff", "X-Forwarded-For: 198.51.100.8\r\n"),
	} {
		if code := sendFrom(t, "127.0.0.1", addr, raw); code != 200 {
			t.Fatalf("%s: %d", id, code)
		}
	}
	// From a peer that is not trusted, a PROXY line is a malformed request.
	if code := sendFrom(t, "127.0.0.3", addr, v1+get("untrusted")); code != 400 {
		t.Fatalf("a PROXY line from an untrusted peer answered %d, want 400", code)
	}
	if code := sendFrom(t, "127.0.0.3", addr, get("untrusted-plain")); code != 200 {
		t.Fatalf("a plain request from an untrusted peer answered %d", code)
	}
	got := lines()
	checkHosts(t, got, map[string][2]string{
		"v1": {"203.0.113.7", "127.0.0.1"}, "v2": {"2001:db8::42", "127.0.0.1"}, "none": {"127.0.0.1", ""},
		"v1-then-xff": {"198.51.100.8", "127.0.0.1"}, "untrusted-plain": {"127.0.0.3", ""},
	})
	for _, l := range got {
		if strings.Contains(l, "id:untrusted\t") {
			t.Fatalf("the refused request was logged: %q", l)
		}
	}
}
