package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"time"

	"tsubame"
	"tsubame/internal/admin"
	"tsubame/internal/bulk"
	"tsubame/internal/config"
	"tsubame/internal/render"
)

// The data commands through a running server. While a server holds the
// embedded store (bbolt's file lock), the placements and campaigns
// commands send their work to that server's admin API over its control
// socket (admin.socket, internal/admin/socket.go), which takes this user
// as an admin: the server validates, writes through its cache and audits
// as it does for any API request, and the commands print what they print
// on the store itself.

// Bounds of the control socket's requests: connecting, one object's
// request, and an import or export (an import of admin.max_import_bytes
// is checked and written before its answer).
const (
	socketDialTimeout = 2 * time.Second
	socketCallTimeout = 30 * time.Second
	socketBulkTimeout = 10 * time.Minute
)

// maxErrorBody bounds an error answer read: an import's problems, up to
// a thousand lines.
const maxErrorBody = 4 << 20

// errNoServerSocket: no server answers on the control socket (none made,
// or admin.socket is off).
var errNoServerSocket = errors.New("no control socket answers")

// serverAPI is the admin API of the running server, on its control socket.
// It is safe for concurrent use.
type serverAPI struct {
	socket string
	pid    int // the server's, as the kernel gave it when dialServer connected
	client *http.Client
}

// dialServer connects to the control socket of cfg and returns its API,
// or errNoServerSocket when admin.socket is off or nothing listens there.
func dialServer(ctx context.Context, cfg *config.Config) (*serverAPI, error) {
	path := cfg.AdminSocketPath()
	if path == "" {
		return nil, errNoServerSocket
	}
	a := &serverAPI{socket: path}
	c, peer, err := a.connect(ctx)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
		return nil, errNoServerSocket
	}
	if err != nil {
		return nil, err
	}
	c.Close()
	a.pid = peer.PID
	a.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, _, err := a.connect(ctx)
			return c, err
		},
		MaxIdleConns:       1,
		IdleConnTimeout:    30 * time.Second,
		DisableCompression: true, // a local socket
	}, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // the API answers, it never sends elsewhere
	}}
	return a, nil
}

// connect connects to the control socket and checks the process that
// serves it: this user's or root's, so that no other user's socket put in
// its place is sent anything.
func (a *serverAPI) connect(ctx context.Context) (net.Conn, admin.Peer, error) {
	d := net.Dialer{Timeout: socketDialTimeout}
	c, err := d.DialContext(ctx, "unix", a.socket)
	if err != nil {
		return nil, admin.Peer{}, fmt.Errorf("cannot connect to the control socket %s: %w", a.socket, err)
	}
	p, err := admin.PeerOf(c)
	if err == nil && p.UID != os.Getuid() && p.UID != 0 {
		err = fmt.Errorf("its server runs as uid %d, neither this user (uid %d) nor root", p.UID, os.Getuid())
	}
	if err != nil {
		c.Close()
		return nil, admin.Peer{}, fmt.Errorf("control socket %s: %w", a.socket, err)
	}
	return c, p, nil
}

// call sends a request to the API and hands a 2xx answer's body to read
// (nil: the body is dropped); any other answer is returned as the domain
// error the server gave.
func (a *serverAPI) call(ctx context.Context, timeout time.Duration, method, path string, query url.Values, body io.Reader,
	contentType string, read func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	target := "http://localhost" + path // escaped already
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "tsubame-cli/"+version)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "the running server (pid %d) did not answer on %s", a.pid, a.socket)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return answerError(resp)
	}
	if read == nil {
		return nil
	}
	if err := read(resp.Body); err != nil {
		return fmt.Errorf("reading the running server's answer: %w", err)
	}
	return nil
}

// answerError turns an error answer into the domain error it stands for,
// with the server's message: the message the command prints on the store
// itself.
func answerError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil || e.Error == "" {
		e.Error = "the running server answered " + resp.Status
	}
	code := codeOf(resp.StatusCode)
	if code == tsubame.EINTERNAL {
		return tsubame.Errorf(code, "the running server failed: %s (see its log)", e.Error)
	}
	return tsubame.Errorf(code, "%s", e.Error)
}

// codeOf is the domain error kind an API status stands for:
// render.HTTPStatus read backwards, so that the mapping stays in one place.
func codeOf(status int) string {
	for _, code := range []string{tsubame.EINVALID, tsubame.ENOTFOUND, tsubame.ECONFLICT, tsubame.EUNAVAILABLE,
		tsubame.EUNAUTHORIZED, tsubame.ETOOLARGE} {
		if render.HTTPStatus(tsubame.Errorf(code, "")) == status {
			return code
		}
	}
	return tsubame.EINTERNAL
}

// decodeInto reads a JSON answer into v.
func decodeInto(v any) func(io.Reader) error {
	return func(r io.Reader) error { return json.NewDecoder(r).Decode(v) }
}

// placementPath is the API path of placement id. The ids "." and "..",
// valid in the store, cannot be named in a path (it would be cleaned).
func placementPath(id string) (string, error) {
	if id == "." || id == ".." {
		return "", tsubame.Errorf(tsubame.EINVALID, "placement %q cannot be named in the admin API's paths: stop the server to change it here", id)
	}
	return "/api/v1/placements/" + url.PathEscape(id), nil
}

// Get, Put, PutMany, Delete and Export make serverAPI a placementStore.

func (a *serverAPI) Get(ctx context.Context, id string) (*tsubame.Placement, error) {
	path, err := placementPath(id)
	if err != nil {
		return nil, err
	}
	var p tsubame.Placement
	if err := a.call(ctx, socketCallTimeout, http.MethodGet, path, nil, nil, "", decodeInto(&p)); err != nil {
		return nil, err
	}
	return &p, nil
}

func (a *serverAPI) Put(ctx context.Context, p *tsubame.Placement) error {
	path, err := placementPath(p.ID)
	if err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return a.call(ctx, socketCallTimeout, http.MethodPut, path, nil, bytes.NewReader(b), "application/json", decodeInto(p))
}

// PutMany sends ps, read and checked here already, as JSON lines to the
// import route, which checks them again and writes all or none.
func (a *serverAPI) PutMany(ctx context.Context, ps []*tsubame.Placement) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, p := range ps {
		if err := enc.Encode(p); err != nil {
			return err
		}
	}
	return a.call(ctx, socketBulkTimeout, http.MethodPost, "/api/v1/import", url.Values{"format": {string(bulk.JSONLines)}},
		&buf, "application/jsonl", nil)
}

func (a *serverAPI) Delete(ctx context.Context, id string) error {
	path, err := placementPath(id)
	if err != nil {
		return err
	}
	return a.call(ctx, socketCallTimeout, http.MethodDelete, path, nil, nil, "", nil)
}

// Export copies the server's export (JSON lines, in id order) to w and
// counts its lines. A connection the server aborts, as it does when its
// store fails mid-way, is an error.
func (a *serverAPI) Export(ctx context.Context, w io.Writer) (int, error) {
	lc := &lineCounter{w: w}
	err := a.call(ctx, socketBulkTimeout, http.MethodGet, "/api/v1/export", nil, nil, "", func(r io.Reader) error {
		_, err := io.Copy(lc, r)
		return err
	})
	return lc.n, err
}

// lineCounter counts the lines it passes on.
type lineCounter struct {
	w io.Writer
	n int
}

func (c *lineCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += bytes.Count(p[:n], []byte{'\n'})
	return n, err
}

// Import and Stored make serverAPI a campaignFiles.

// Import sends a campaign file to the import route, named as the command
// names it so that the problems the server lists read as they do here.
func (a *serverAPI) Import(ctx context.Context, in io.Reader, name string, format bulk.CampaignFormat, replace bool) (file, stored map[string]int, err error) {
	q := url.Values{"mode": {"merge"}, "name": {name}}
	if replace {
		q.Set("mode", "replace")
	}
	contentType := "application/octet-stream" // sniffed
	if format != bulk.CampaignsAuto {
		q.Set("format", string(format))
		contentType = map[bulk.CampaignFormat]string{bulk.CampaignsJSON: "application/json", bulk.CampaignsYAML: "application/yaml"}[format]
	}
	var answer struct {
		Imported map[string]int `json:"imported"`
		Stored   map[string]int `json:"stored"`
	}
	if err := a.call(ctx, socketBulkTimeout, http.MethodPost, "/api/v1/campaigns/import", q, in, contentType, decodeInto(&answer)); err != nil {
		return nil, nil, err
	}
	return answer.Imported, answer.Stored, nil
}

// Stored reads the server's campaign export back into the set, checked
// whole.
func (a *serverAPI) Stored(ctx context.Context) (*tsubame.CampaignSet, error) {
	var set *tsubame.CampaignSet
	err := a.call(ctx, socketBulkTimeout, http.MethodGet, "/api/v1/campaigns/export", url.Values{"format": {string(bulk.CampaignsJSON)}},
		nil, "", func(r io.Reader) error {
			file, err := bulk.ReadCampaigns(r, "the server's export", bulk.CampaignsJSON)
			if err == nil {
				set, err = file.Resolve(&tsubame.CampaignSet{}, true)
			}
			return err
		})
	return set, err
}

// Close drops the idle connection.
func (a *serverAPI) Close() error {
	a.client.CloseIdleConnections()
	return nil
}

// viaServer opens the running server's API for a command the embedded
// store's lock (inUse, from opening the store) refuses, and says on stderr
// that the command goes through it. Without a control socket it returns
// the refusal, with what to do instead (what: "change placements through
// its admin API (...)").
func viaServer(ctx context.Context, cfg *config.Config, inUse error, what string, stderr io.Writer) (*serverAPI, error) {
	return viaServerHolding(ctx, cfg, inUse, what, "the store is", stderr)
}

// viaServerHolding is viaServer saying what the server holds ("the store
// is", "the reports are").
func viaServerHolding(ctx context.Context, cfg *config.Config, inUse error, what, held string, stderr io.Writer) (*serverAPI, error) {
	a, err := dialServer(ctx, cfg)
	if errors.Is(err, errNoServerSocket) {
		socket := "its control socket, which these commands would go through, is off (admin.socket)"
		if path := cfg.AdminSocketPath(); path != "" {
			socket = "no control socket answers at " + path + " (admin.socket)"
		}
		return nil, tsubame.Errorf(tsubame.ECONFLICT, "%s: stop that server, or %s; %s", tsubame.ErrorMessage(inUse), what, socket)
	}
	if err != nil {
		return nil, tsubame.WrapError(tsubame.ECONFLICT, err, "%s, and its control socket cannot be used", tsubame.ErrorMessage(inUse))
	}
	fmt.Fprintf(stderr, "tsubame: %s held by the running server (pid %d): going through its control socket %s\n", held, a.pid, a.socket)
	return a, nil
}
