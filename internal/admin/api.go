package admin

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/pquerna/otp"

	"tsubame"
	"tsubame/internal/bulk"
	"tsubame/internal/render"
)

// Paging bounds for GET /api/v1/placements.
const (
	defaultPageSize = 50
	maxPageSize     = 1000
)

// maxPlacementBody bounds the body of one placement's PUT.
const maxPlacementBody = 256 << 10

func (s *Server) apiRoutes(mux *http.ServeMux) {
	viewer := func(h http.HandlerFunc) http.HandlerFunc { return s.requireRole(RoleViewer, h) }
	editor := func(h http.HandlerFunc) http.HandlerFunc { return s.requireRole(RoleEditor, h) }
	admin := func(h http.HandlerFunc) http.HandlerFunc { return s.requireRole(RoleAdmin, h) }
	mux.HandleFunc("GET /api/v1/placements", viewer(s.listPlacements))
	mux.HandleFunc("GET /api/v1/placements/{id}", viewer(s.getPlacement))
	mux.HandleFunc("PUT /api/v1/placements/{id}", editor(s.putPlacement))
	mux.HandleFunc("DELETE /api/v1/placements/{id}", editor(s.deletePlacement))
	mux.HandleFunc("POST /api/v1/import", editor(s.importPlacements))
	mux.HandleFunc("GET /api/v1/export", viewer(s.exportPlacements))
	mux.HandleFunc("POST /api/v1/purge", editor(s.purge))
	mux.HandleFunc("GET /api/v1/config", viewer(s.config))
	mux.HandleFunc("GET /api/v1/accesslog", viewer(s.accessLog))
	mux.HandleFunc("GET /api/v1/stats", viewer(s.statsNow))
	mux.HandleFunc("GET /api/v1/stats/stream", viewer(s.statsStream))
	if s.stats != nil && s.opt.Metrics != nil { // the per-endpoint view reads the request metrics
		s.stats.endpoints.Store(newEndpointTracker(s.opt.Metrics, s.opt.Endpoints))
	}
	mux.HandleFunc("GET /api/v1/whoami", s.whoami) // answers anyone: see whoami.go
	mux.HandleFunc("GET /api/v1/store/audit", admin(s.storeAudit))
	mux.HandleFunc("GET /api/v1/decide/explain", admin(s.explain))
	mux.HandleFunc("POST /api/v1/store/audit", admin(s.storeAudit))
	mux.HandleFunc("GET /api/v1/tokens", admin(s.listTokens))
	mux.HandleFunc("POST /api/v1/tokens", admin(s.createToken))
	mux.HandleFunc("DELETE /api/v1/tokens/{id}", admin(s.deleteToken))
	mux.HandleFunc("GET /api/v1/users", admin(s.listUsers))
	mux.HandleFunc("POST /api/v1/users", admin(s.createUser))
	mux.HandleFunc("PUT /api/v1/users/{name}/role", admin(s.setRole))
	mux.HandleFunc("DELETE /api/v1/users/{name}", admin(s.deleteUser))
	s.campaignRoutes(mux)
	s.reportRoutes(mux)
	s.tagRoutes(mux)
	s.assetRoutes(mux)
}

// writeStoreError answers err with the status of its kind and its safe
// message (internal errors say only "internal error").
func (s *Server) writeStoreError(w http.ResponseWriter, err error) {
	status := render.HTTPStatus(err)
	if status == http.StatusInternalServerError {
		s.log.Error("admin API", "err", err)
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	body := map[string]any{"error": tsubame.ErrorMessage(err)}
	if ps := problemsOf(err); len(ps) > 0 {
		body["problems"] = ps
	}
	writeJSON(w, status, body)
}

// problem is one problem of an input as the API answers it, for a form to
// show on its field: the path into the input (cpm,
// line_items[3] (id "li-7").targeting.countries[0], or naming an object
// by kind and id), the line of a file when known, and what is wrong.
type problem struct {
	Path    string `json:"path,omitempty"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// problemsOf lists an EINVALID error's problems: a file's (or a body's)
// or the model's, every one of them.
func problemsOf(err error) []problem {
	var out []problem
	if fe, ok := errors.AsType[*bulk.FileError](err); ok {
		for _, p := range fe.Problems {
			out = append(out, problem{Path: p.Path, Line: p.Line, Message: p.Message})
		}
	} else if ps, ok := errors.AsType[tsubame.Problems](err); ok {
		for _, p := range ps {
			out = append(out, problem{Path: p.Path, Message: p.Message})
		}
	}
	return out
}

// done audits an action by the request's user and answers its error, if any.
func (s *Server) done(w http.ResponseWriter, r *http.Request, action, target string, err error) bool {
	actor := identityOf(r).actor
	if err != nil {
		result := "error"
		if k := tsubame.ErrorCode(err); k == tsubame.EINVALID || k == tsubame.ENOTFOUND || k == tsubame.ECONFLICT {
			result = "invalid"
		}
		s.audit(r, actor, action, target, result, tsubame.ErrorMessage(err))
		s.writeStoreError(w, err)
		return false
	}
	s.audit(r, actor, action, target, "ok", "")
	return true
}

// listPlacements answers a page of placements in natural id order
// (digit runs by their value: 1, 2, 10, 100, p2, p10), which is how people
// number placements, with the total count:
//
//	?limit=N (1..1000, default 50) and offset=N, or after=ID (the page after
//	that id), and q=TEXT: only placements whose id or name holds TEXT
//	(case-insensitive).
//
// The ids are read and sorted on every request (a store keeps them in byte
// order), which costs a few milliseconds per 100,000 placements; a search
// reads every placement.
func (s *Server) listPlacements(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, search := q.Get("after"), q.Get("q")
	limit, offset := defaultPageSize, 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageSize {
			writeError(w, http.StatusBadRequest, "limit must be 1 to "+strconv.Itoa(maxPageSize))
			return
		}
		limit = n
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "offset must be a whole number, 0 or more")
			return
		}
		offset = n
	}
	if after != "" && tsubame.ValidID(after) != nil {
		writeError(w, http.StatusBadRequest, "after must be a placement id")
		return
	}
	if after != "" && offset != 0 {
		writeError(w, http.StatusBadRequest, "give after or offset, not both")
		return
	}
	if len(search) > maxSearch || !utf8.ValidString(search) {
		writeError(w, http.StatusBadRequest, "q must be text of at most "+strconv.Itoa(maxSearch)+" bytes")
		return
	}
	ctx := r.Context()
	var (
		ps    []*tsubame.Placement
		total int
	)
	if search != "" {
		matches, err := s.searchPlacements(ctx, search)
		if err != nil {
			s.writeStoreError(w, err)
			return
		}
		slices.SortFunc(matches, func(a, b *tsubame.Placement) int { return NaturalCompare(a.ID, b.ID) })
		total = len(matches)
		if after != "" {
			i, found := slices.BinarySearchFunc(matches, after, func(p *tsubame.Placement, id string) int { return NaturalCompare(p.ID, id) })
			if found {
				i++
			}
			offset = i
		}
		ps = matches[min(offset, total):min(offset+limit, total)]
	} else {
		ids, err := s.opt.Placements.IDs(ctx)
		if err != nil {
			s.writeStoreError(w, err)
			return
		}
		slices.SortFunc(ids, NaturalCompare)
		total = len(ids)
		if after != "" {
			offset = afterIndex(ids, after)
		}
		for _, id := range ids[min(offset, total):min(offset+limit, total)] {
			p, err := s.opt.Placements.Get(ctx, id)
			if tsubame.IsNotFound(err) {
				continue // deleted since the ids were read
			}
			if err != nil {
				s.writeStoreError(w, err)
				return
			}
			ps = append(ps, p)
		}
	}
	next := ""
	if offset+limit < total && len(ps) > 0 {
		next = ps[len(ps)-1].ID
	}
	if ps == nil {
		ps = []*tsubame.Placement{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"placements": ps, "next": next, "total": total, "offset": offset})
}

func (s *Server) getPlacement(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := tsubame.ValidID(id); err != nil {
		s.writeStoreError(w, err)
		return
	}
	p, err := s.opt.Placements.Get(r.Context(), id)
	if err != nil {
		s.writeStoreError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// putPlacement creates or replaces a placement. The body is a placement;
// its id, if given, must match the path's.
func (s *Server) putPlacement(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var p tsubame.Placement
	err := tsubame.ValidID(id)
	if err == nil {
		err = decodeBody(w, r, maxPlacementBody, &p)
	}
	if err == nil && p.ID != "" && p.ID != id {
		err = tsubame.Errorf(tsubame.EINVALID, "the body's id %q differs from the path's", p.ID)
	}
	if err == nil {
		p.ID = id
		err = s.opt.Placements.Put(r.Context(), &p)
	}
	if s.done(w, r, "placement.put", id, err) {
		writeJSON(w, http.StatusOK, &p)
	}
}

func (s *Server) deletePlacement(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := tsubame.ValidID(id)
	if err == nil {
		err = s.opt.Placements.Delete(r.Context(), id)
	}
	if s.done(w, r, "placement.delete", id, err) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// importPlacements writes every placement of the body (JSON lines, a JSON
// array or CSV, as ?format= says or sniffed), all or none.
func (s *Server) importPlacements(w http.ResponseWriter, r *http.Request) {
	format := bulk.Auto
	var err error
	if f := r.URL.Query().Get("format"); f != "" {
		if format, err = bulk.ParseFormat(f); err != nil {
			err = tsubame.WrapError(tsubame.EINVALID, err, "%v", err)
		}
	}
	var ps []*tsubame.Placement
	if err == nil {
		ps, err = bulk.Read(http.MaxBytesReader(w, r.Body, s.opt.MaxImportBytes), format)
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			err = tsubame.Errorf(tsubame.EINVALID, "import body exceeds %d bytes (admin.max_import_bytes)", s.opt.MaxImportBytes)
		} else if err != nil {
			// Everything else Read reports is about the body.
			err = tsubame.WrapError(tsubame.EINVALID, err, "%v", err)
		}
	}
	if err == nil {
		err = s.opt.Placements.PutMany(r.Context(), ps)
	}
	if s.done(w, r, "placement.import", strconv.Itoa(len(ps))+" placements", err) {
		writeJSON(w, http.StatusOK, map[string]int{"imported": len(ps)})
	}
}

// exportPlacements answers every placement as JSON lines in id (byte)
// order: what `tsubame placements export` writes and POST /api/v1/import
// reads. It streams; a failure once the answer has begun aborts the
// connection, so that no client takes a cut export for a whole one.
func (s *Server) exportPlacements(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/jsonl")
	cw := &countingWriter{w: w}
	if _, err := bulk.Write(r.Context(), cw, s.opt.Placements); err != nil {
		if cw.n == 0 {
			s.writeStoreError(w, err)
			return
		}
		if r.Context().Err() == nil { // else the client left
			s.log.Error("admin API: placement export cut short", "err", err)
		}
		panic(http.ErrAbortHandler)
	}
}

// countingWriter counts what it passes on.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type purgeRequest struct {
	IDs  []string `json:"ids"`
	Deps []string `json:"deps"`
	All  bool     `json:"all"`
}

// purge drops cached placements on every node.
func (s *Server) purge(w http.ResponseWriter, r *http.Request) {
	var req purgeRequest
	err := decodeBody(w, r, maxPlacementBody, &req)
	if err == nil && len(req.IDs) == 0 && len(req.Deps) == 0 && !req.All {
		err = tsubame.Errorf(tsubame.EINVALID, "name ids, deps or all")
	}
	if err == nil && len(req.IDs)+len(req.Deps) > 10000 {
		err = tsubame.Errorf(tsubame.EINVALID, "at most 10,000 ids and deps per purge")
	}
	for _, id := range req.IDs {
		if err == nil {
			err = tsubame.ValidID(id)
		}
	}
	for _, d := range req.Deps {
		if err == nil && (d == "" || len(d) > tsubame.MaxDepLength) {
			err = tsubame.Errorf(tsubame.EINVALID, "a dependency key must be 1 to %d bytes", tsubame.MaxDepLength)
		}
	}
	if err == nil {
		err = s.opt.Purge(r.Context(), req.IDs, req.Deps, req.All)
	}
	target := strconv.Itoa(len(req.IDs)) + " ids, " + strconv.Itoa(len(req.Deps)) + " deps"
	if req.All {
		target = "all"
	}
	if s.done(w, r, "cache.purge", target, err) {
		writeJSON(w, http.StatusOK, map[string]any{"purged": req})
	}
}

func (s *Server) config(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.opt.ConfigView())
}

func (s *Server) accessLog(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.opt.AccessLog())
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	ts := s.accounts.Tokens(identityOf(r).user)
	out := make([]map[string]any, 0, len(ts))
	for _, t := range ts {
		m := map[string]any{"id": t.ID, "name": t.Name, "role": t.Role, "created": t.Created}
		if t.Scope != "" {
			m["scope"] = t.Scope
		}
		if !t.Expires.IsZero() {
			m["expires"] = t.Expires
		}
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": out})
}

type tokenRequest struct {
	Name string `json:"name"`
	// TTL is a Go duration ("720h"); empty means admin.max_token_ttl.
	TTL string `json:"ttl"`
	// Role is at most the creator's (the default); Scope "metrics" limits
	// the token to GET /metrics.
	Role  string `json:"role"`
	Scope string `json:"scope"`
}

// createToken makes an API token for the request's user; the answer holds
// the token, shown this once.
func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	var req tokenRequest
	var ttl time.Duration
	err := decodeBody(w, r, maxAuthBody, &req)
	if err == nil && req.TTL != "" {
		if ttl, err = time.ParseDuration(req.TTL); err != nil || ttl <= 0 {
			err = tsubame.Errorf(tsubame.EINVALID, "ttl must be a positive duration such as 720h")
		}
	}
	if err == nil {
		ttl, err = TokenLifetime(ttl, s.opt.MaxTokenTTL)
	}
	id := identityOf(r)
	role := id.role
	if err == nil && req.Role != "" {
		if role, err = ParseRole(req.Role); err == nil && !id.role.Allows(role) {
			err = tsubame.Errorf(tsubame.EINVALID, "a token's role cannot exceed yours (%s)", id.role)
		}
	}
	var plain string
	var t *Token
	if err == nil {
		plain, t, err = s.accounts.CreateTokenWith(id.user, req.Name, ttl, role, req.Scope)
	}
	target := req.Name
	if t != nil {
		target = t.ID
	}
	if s.done(w, r, "token.create", target, err) {
		writeJSON(w, http.StatusCreated, map[string]any{"id": t.ID, "name": t.Name, "role": t.Role, "scope": t.Scope, "token": plain, "expires": t.Expires})
	}
}

func (s *Server) deleteToken(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := s.accounts.DeleteToken(identityOf(r).user, id)
	if s.done(w, r, "token.delete", id, err) {
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) listUsers(w http.ResponseWriter, _ *http.Request) {
	names, err := s.accounts.Users()
	if err != nil {
		s.writeStoreError(w, err)
		return
	}
	roles := make(map[string]Role, len(names))
	for _, n := range names {
		roles[n] = s.accounts.RoleOf(n)
	}
	writeJSON(w, http.StatusOK, map[string]any{"users": names, "roles": roles})
}

type userRequest struct {
	User     string `json:"user"`
	Password string `json:"password"`
	// Role is viewer (the default), editor or admin.
	Role string `json:"role"`
}

// createUser adds a user; the answer holds their TOTP secret, shown once.
func (s *Server) createUser(w http.ResponseWriter, r *http.Request) {
	var req userRequest
	err := decodeBody(w, r, maxAuthBody, &req)
	var key *otp.Key
	if err == nil {
		err = ValidUserName(req.User)
	}
	if err == nil {
		key, err = NewTOTP(req.User)
	}
	role := RoleViewer
	if err == nil && req.Role != "" {
		role, err = ParseRole(req.Role)
	}
	if err == nil {
		err = s.accounts.CreateUserWithRole(req.User, req.Password, key.Secret(), role, s.opt.Policy)
	}
	if s.done(w, r, "user.create", req.User, err) {
		writeJSON(w, http.StatusCreated, enrolment(req.User, role, key))
	}
}

// setRole changes a user's role: {"role": "editor"}. Nobody raises their
// own role, and the last admin stays an admin.
func (s *Server) setRole(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var req struct {
		Role string `json:"role"`
	}
	err := decodeBody(w, r, maxAuthBody, &req)
	var role Role
	if err == nil {
		role, err = ParseRole(req.Role)
	}
	id := identityOf(r)
	if err == nil && name == id.user && !id.role.Allows(role) {
		err = tsubame.Errorf(tsubame.EINVALID, "nobody raises their own role")
	}
	if err == nil {
		err = s.accounts.SetRole(name, role)
	}
	if s.done(w, r, "user.role", name+"="+string(role), err) {
		writeJSON(w, http.StatusOK, map[string]string{"user": name, "role": string(role)})
	}
}

func (s *Server) deleteUser(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	err := s.accounts.DeleteUser(name)
	if err == nil {
		s.sessions.endUser(name)
	}
	if s.done(w, r, "user.delete", name, err) {
		w.WriteHeader(http.StatusNoContent)
	}
}
