package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

// Syslog copies every audit line to a syslog server as an RFC 5424
// message, so the record also lives off the box: over TCP (octet-counted
// frames, RFC 6587), TLS (RFC 5425) or a local unix socket (one datagram
// per message, as /dev/log takes; a stream socket gets TCP's framing).
//
// The message is <PRI>1 TIMESTAMP HOSTNAME tsubame PID audit - LINE, with
// LINE the audit line exactly as in the file (non-ASCII characters
// \u-escaped, so it is the plain-ASCII MSG RFC 5424 allows without a BOM);
// the severity is notice for a success and warning for a failure.
//
// Sending is off the caller's path: lines queue (bounded; an overflow is
// dropped and counted) and one goroutine writes them, reconnecting with a
// backoff while the server is away. Syslog over TCP has no
// acknowledgements, so the copy is best effort: the file, with its hash
// chain, stays the record; the copy is what an intruder on this box cannot
// rewrite.
type Syslog struct {
	network, addr string
	tls           *tls.Config
	facility      int
	host          string
	pid           string
	log           *slog.Logger
	notify        *Notifier

	q         chan []byte
	done      chan struct{}
	stop      chan struct{}
	closeOnce sync.Once

	sent, dropped atomic.Uint64
	failing       atomic.Bool
}

// SyslogDrain bounds the wait for queued lines when the audit log closes.
const SyslogDrain = 5 * time.Second

// SyslogQueue bounds the lines waiting to be sent.
const SyslogQueue = 10000

// SyslogFacilities are the facility names admin.audit_syslog_facility
// takes, with their codes (RFC 5424 §6.2.1).
var SyslogFacilities = map[string]int{
	"kern": 0, "user": 1, "mail": 2, "daemon": 3, "auth": 4, "syslog": 5, "lpr": 6, "news": 7, "uucp": 8,
	"cron": 9, "authpriv": 10, "ftp": 11, "local0": 16, "local1": 17, "local2": 18, "local3": 19,
	"local4": 20, "local5": 21, "local6": 22, "local7": 23,
}

// SyslogOptions configure a Syslog.
type SyslogOptions struct {
	// Address is tcp://HOST:PORT, tls://HOST:PORT or unix:///PATH.
	Address string
	// Facility is a name from SyslogFacilities.
	Facility string
	// TLS is the client configuration for tls:// (nil: the system's
	// roots, the address's host as server name).
	TLS    *tls.Config
	Logger *slog.Logger
	// Notifier, if set, is told when the copy starts and stops failing.
	Notifier *Notifier
}

// ParseSyslogAddress splits a syslog address into the network to dial and
// the address on it.
func ParseSyslogAddress(raw string) (network, addr string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("must be tcp://HOST:PORT, tls://HOST:PORT or unix:///PATH")
	}
	switch u.Scheme {
	case "tcp", "tls":
		if u.Host == "" || u.Port() == "" || u.Path != "" || u.User != nil || u.RawQuery != "" {
			return "", "", fmt.Errorf("must be %s://HOST:PORT", u.Scheme)
		}
		return u.Scheme, u.Host, nil
	case "unix":
		if u.Host != "" || u.Path == "" || u.RawQuery != "" {
			return "", "", fmt.Errorf("must be unix:///PATH (an absolute path)")
		}
		return "unix", u.Path, nil
	}
	return "", "", fmt.Errorf("must be tcp://HOST:PORT, tls://HOST:PORT or unix:///PATH")
}

// NewSyslog starts copying to opt.Address.
func NewSyslog(opt SyslogOptions) (*Syslog, error) {
	network, addr, err := ParseSyslogAddress(opt.Address)
	if err != nil {
		return nil, err
	}
	facility, ok := SyslogFacilities[opt.Facility]
	if !ok {
		return nil, fmt.Errorf("unknown syslog facility %q", opt.Facility)
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	host, _ := os.Hostname()
	if host = printable(host, 255); host == "" {
		host = "-"
	}
	s := &Syslog{network: network, addr: addr, facility: facility, host: host, pid: strconv.Itoa(os.Getpid()),
		log: opt.Logger, notify: opt.Notifier, q: make(chan []byte, SyslogQueue), done: make(chan struct{}),
		stop: make(chan struct{})}
	if network == "tls" {
		s.tls = opt.TLS
		if s.tls == nil {
			s.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if s.tls.ServerName == "" {
			s.tls = s.tls.Clone()
			s.tls.ServerName, _, _ = net.SplitHostPort(addr)
		}
	}
	go s.run()
	return s, nil
}

// printable keeps the first n printable ASCII characters of s (RFC 5424's
// PRINTUSASCII), dropping others.
func printable(s string, n int) string {
	b := make([]byte, 0, min(len(s), n))
	for i := 0; i < len(s) && len(b) < n; i++ {
		if s[i] >= 33 && s[i] <= 126 {
			b = append(b, s[i])
		}
	}
	return string(b)
}

// Send queues a copy of line (an audit line without its newline); failure
// marks a failed action (severity warning, else notice). It never blocks.
func (s *Syslog) Send(line []byte, failure bool) {
	severity := 5 // notice
	if failure {
		severity = 4 // warning
	}
	msg := s.format(time.Now(), severity, line)
	select {
	case s.q <- msg:
	default:
		if s.dropped.Add(1) == 1 {
			s.log.Error("audit copy to syslog: queue full, lines dropped (the file keeps them)", "queue", SyslogQueue)
		}
	}
}

// format builds one RFC 5424 message.
func (s *Syslog) format(now time.Time, severity int, line []byte) []byte {
	b := make([]byte, 0, len(line)+96)
	b = append(b, '<')
	b = strconv.AppendInt(b, int64(s.facility*8+severity), 10)
	b = append(b, ">1 "...)
	b = now.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
	b = append(b, ' ')
	b = append(b, s.host...)
	b = append(b, " tsubame "...)
	b = append(b, s.pid...)
	b = append(b, " audit - "...)
	return appendASCIIJSON(b, line)
}

// appendASCIIJSON appends a JSON text with every non-ASCII character
// written as a \u escape (the same JSON value).
func appendASCIIJSON(b, line []byte) []byte {
	const hex = "0123456789abcdef"
	for len(line) > 0 {
		c := line[0]
		if c < utf8.RuneSelf {
			b = append(b, c)
			line = line[1:]
			continue
		}
		r, size := utf8.DecodeRune(line)
		line = line[size:]
		if r >= 0x10000 {
			r -= 0x10000
			hi, lo := 0xd800+(r>>10), 0xdc00+(r&0x3ff)
			b = append(b, '\\', 'u', hex[hi>>12], hex[hi>>8&15], hex[hi>>4&15], hex[hi&15])
			r = lo
		}
		b = append(b, '\\', 'u', hex[r>>12], hex[r>>8&15], hex[r>>4&15], hex[r&15])
	}
	return b
}

// SyslogStats are the copy's counters.
type SyslogStats struct {
	Sent, Dropped uint64
	Failing       bool
}

// Stats returns the counters.
func (s *Syslog) Stats() SyslogStats {
	return SyslogStats{Sent: s.sent.Load(), Dropped: s.dropped.Load(), Failing: s.failing.Load()}
}

// Close sends what is queued while the server takes it, until ctx ends,
// then stops.
func (s *Syslog) Close(ctx context.Context) {
	s.closeOnce.Do(func() { close(s.q) })
	select {
	case <-s.done:
	case <-ctx.Done():
		close(s.stop)
		<-s.done
	}
}

const (
	syslogDialTimeout  = 5 * time.Second
	syslogWriteTimeout = 10 * time.Second
	syslogMaxBackoff   = 30 * time.Second
)

func (s *Syslog) run() {
	defer close(s.done)
	var conn net.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	backoff := time.Second
	for msg := range s.q {
		for {
			var err error
			if conn == nil {
				conn, err = s.dial()
			}
			if err == nil {
				if err = s.write(conn, msg); err != nil {
					conn.Close()
					conn = nil
				}
			}
			if err == nil {
				s.sent.Add(1)
				backoff = time.Second
				if s.failing.CompareAndSwap(true, false) {
					s.log.Info("audit copy to syslog: sending again", "address", s.network+"://"+s.addr)
					if s.notify != nil {
						s.notify.Notify("audit copy to syslog (%s://%s) is sending again", s.network, s.addr)
					}
				}
				break
			}
			if s.failing.CompareAndSwap(false, true) {
				s.log.Error("audit copy to syslog failing; lines wait in memory (bounded) and stay in the file",
					"address", s.network+"://"+s.addr, "err", err)
				if s.notify != nil {
					s.notify.Notify("audit copy to syslog (%s://%s) failing: %v", s.network, s.addr, err)
				}
			}
			select {
			case <-s.stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, syslogMaxBackoff)
		}
	}
}

func (s *Syslog) dial() (net.Conn, error) {
	d := net.Dialer{Timeout: syslogDialTimeout}
	switch s.network {
	case "tls":
		return (&tls.Dialer{NetDialer: &d, Config: s.tls}).Dial("tcp", s.addr)
	case "unix":
		c, err := d.Dial("unixgram", s.addr)
		if errors.Is(err, syscall.EPROTOTYPE) {
			return d.Dial("unix", s.addr)
		}
		if err == nil {
			return datagramConn{c}, nil
		}
		return nil, err
	}
	return d.Dial("tcp", s.addr)
}

// datagramConn marks a datagram socket: one message per write, unframed.
type datagramConn struct{ net.Conn }

// write sends one message: a datagram as it is, on a stream with its
// length in front (octet counting, RFC 6587 §3.4.1).
func (s *Syslog) write(conn net.Conn, msg []byte) error {
	_ = conn.SetWriteDeadline(time.Now().Add(syslogWriteTimeout))
	if _, ok := conn.(datagramConn); ok {
		_, err := conn.Write(msg)
		return err
	}
	frame := strconv.AppendInt(make([]byte, 0, len(msg)+8), int64(len(msg)), 10)
	frame = append(frame, ' ')
	_, err := conn.Write(append(frame, msg...))
	return err
}
