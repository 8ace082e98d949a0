package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"tsubame"
	"tsubame/internal/bulk"
)

// The campaign API: advertisers, campaigns, creatives and line items, each
// kind under /api/v1/<kind> (list, get, put, delete), pause and resume of
// line items and campaigns, the archive of line items, campaigns and
// advertisers, a creative's approval or rejection (statuses.go), and the whole set imported and exported as a campaign
// file (internal/bulk). Viewers read, editors write; every write is
// audited as <kind>.put, <kind>.delete, line_item.pause, line_item.resume,
// campaigns.import or a status verb's action (statusActions). The store
// checks every write against the whole set, so a write that would leave a
// reference dangling is refused with every problem listed (400), and a
// delete of an object others use is refused naming them (409).

// maxCampaignObjectBody bounds the body of one object's PUT: a line item
// may list up to tsubame.MaxListValues values in each targeting list.
const maxCampaignObjectBody = 4 << 20

// maxAuditDetail bounds the detail of an audit line: an import's problems,
// which the client gets in full, can run to a thousand lines.
const maxAuditDetail = 1 << 10

// campaignKinds are the kinds as the API's paths name them.
var campaignKinds = []struct {
	path string
	kind tsubame.CampaignKind
}{
	{"advertisers", tsubame.KindAdvertiser},
	{"campaigns", tsubame.KindCampaign},
	{"creatives", tsubame.KindCreative},
	{"line-items", tsubame.KindLineItem},
}

// errNoCampaignStore answers every campaign route of a server given no
// campaign store.
var errNoCampaignStore = tsubame.Errorf(tsubame.ENOTFOUND,
	"campaigns need a store that keeps them, and this server's store does not")

// campaignAPI serves the campaign routes.
type campaignAPI struct {
	s     *Server
	store tsubame.CampaignStore
	// mu serialises this node's writes: pause and resume read the line item
	// they rewrite, and a merge import the set it merges into. Writes from
	// other nodes (Redis) are not held off: such a write is made at the
	// version it read (ReplaceAllAt, PutObjectAt), compared by the store in
	// the transaction that writes, so it never undoes one it did not see.
	// An import whose set moved is refused (ECONFLICT: the client sends it
	// again); a pause or resume reads the line item again and retries.
	mu sync.Mutex
}

// statusAttempts bounds how often a pause or resume reads its line item
// again because another node wrote between its read and its write.
const statusAttempts = 5

func (s *Server) campaignRoutes(mux *http.ServeMux) {
	c := &campaignAPI{s: s, store: s.opt.Campaigns}
	viewer := func(h http.HandlerFunc) http.HandlerFunc { return s.requireRole(RoleViewer, c.needStore(h)) }
	editor := func(h http.HandlerFunc) http.HandlerFunc { return s.requireRole(RoleEditor, c.needStore(h)) }
	for _, k := range campaignKinds {
		kind, base := k.kind, "/api/v1/"+k.path
		mux.HandleFunc("GET "+base, viewer(func(w http.ResponseWriter, r *http.Request) { c.list(w, r, kind) }))
		mux.HandleFunc("GET "+base+"/{id}", viewer(func(w http.ResponseWriter, r *http.Request) { c.get(w, r, kind) }))
		mux.HandleFunc("PUT "+base+"/{id}", editor(func(w http.ResponseWriter, r *http.Request) { c.put(w, r, kind) }))
		mux.HandleFunc("DELETE "+base+"/{id}", editor(func(w http.ResponseWriter, r *http.Request) { c.delete(w, r, kind) }))
		mux.HandleFunc("GET "+base+"/{id}/history", viewer(func(w http.ResponseWriter, r *http.Request) { c.history(w, r, kind) }))
	}
	mux.HandleFunc("POST /api/v1/line-items/{id}/pause", editor(func(w http.ResponseWriter, r *http.Request) {
		c.setStatus(w, r, "line_item.pause", tsubame.StatusPaused)
	}))
	mux.HandleFunc("POST /api/v1/line-items/{id}/resume", editor(func(w http.ResponseWriter, r *http.Request) {
		c.setStatus(w, r, "line_item.resume", "") // active, the default
	}))
	c.statusRoutes(mux, editor)
	// These two are more specific than /api/v1/campaigns/{id}: a campaign
	// with the id "export" is read through the list.
	mux.HandleFunc("POST /api/v1/campaigns/import", editor(c.importSet))
	mux.HandleFunc("GET /api/v1/budgets", s.requireRole(RoleViewer, c.needStore(c.budgets)))
	mux.HandleFunc("GET /api/v1/campaigns/export", viewer(c.export))
}

func (c *campaignAPI) needStore(h http.HandlerFunc) http.HandlerFunc {
	if c.store != nil {
		return h
	}
	return func(w http.ResponseWriter, _ *http.Request) { c.s.writeStoreError(w, errNoCampaignStore) }
}

// done is Server.done with the audit line's detail clipped to
// maxAuditDetail; the client gets the whole message.
func (c *campaignAPI) done(w http.ResponseWriter, r *http.Request, action, target string, err error) bool {
	msg := tsubame.ErrorMessage(err)
	if len(msg) <= maxAuditDetail {
		return c.s.done(w, r, action, target, err)
	}
	result := "error"
	if k := tsubame.ErrorCode(err); k == tsubame.EINVALID || k == tsubame.ENOTFOUND || k == tsubame.ECONFLICT {
		result = "invalid"
	}
	c.s.audit(r, identityOf(r).actor, action, target, result, clipDetail(msg))
	c.s.writeStoreError(w, err)
	return false
}

// checkObjectID checks an id from a path as the model checks ids.
func checkObjectID(k tsubame.CampaignKind, id string) error {
	if id == "" || len(id) > tsubame.MaxIDLength {
		return tsubame.Errorf(tsubame.EINVALID, "a %s id is 1 to %d bytes", k, tsubame.MaxIDLength)
	}
	for i := 0; i < len(id); i++ {
		if !tsubame.IDChar(id[i]) {
			return tsubame.Errorf(tsubame.EINVALID, "a %s id may contain only letters, digits and -_.:@", k)
		}
	}
	return nil
}

// readBody reads a request body of at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, setting string) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	return b, bodyError(err, limit, setting)
}

// bodyError turns an error reading a body into a domain error.
func bodyError(err error, limit int64, setting string) error {
	if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
		if setting != "" {
			setting = " (" + setting + ")"
		}
		return tsubame.Errorf(tsubame.ETOOLARGE, "the request body exceeds %d bytes%s", limit, setting)
	}
	if err != nil {
		return tsubame.WrapError(tsubame.EINVALID, err, "cannot read the request body")
	}
	return nil
}

// list answers every object of kind k, in id order, under the kind's
// plural name, with their count; ?status= keeps those in one status
// (filterStatus).
func (c *campaignAPI) list(w http.ResponseWriter, r *http.Request, k tsubame.CampaignKind) {
	objs, err := c.store.ListObjects(r.Context(), k)
	if err == nil {
		objs, err = filterStatus(r, k, objs)
	}
	if err != nil {
		c.s.writeStoreError(w, err)
		return
	}
	if objs == nil {
		objs = []tsubame.CampaignObject{}
	}
	writeJSON(w, http.StatusOK, map[string]any{k.Plural(): c.s.withStatus(r.Context(), k, objs), "total": len(objs)})
}

func (c *campaignAPI) get(w http.ResponseWriter, r *http.Request, k tsubame.CampaignKind) {
	id := r.PathValue("id")
	var o tsubame.CampaignObject
	err := checkObjectID(k, id)
	if err == nil {
		o, err = c.store.GetObject(r.Context(), k, id)
	}
	if err != nil {
		c.s.writeStoreError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c.s.withStatus(r.Context(), k, []tsubame.CampaignObject{o})[0])
}

// put creates or replaces the object of kind k with the path's id. The
// body is the object, decoded strictly (every unknown field and value of
// the wrong type listed); its id, if given, must be the path's.
func (c *campaignAPI) put(w http.ResponseWriter, r *http.Request, k tsubame.CampaignKind) {
	id := r.PathValue("id")
	o := tsubame.NewCampaignObject(k)
	err := checkObjectID(k, id)
	var body []byte
	if err == nil {
		body, err = readBody(w, r, maxCampaignObjectBody, "")
	}
	if err == nil {
		err = bulk.DecodeObject(withoutStatus(k, body), "body", id, o)
	}
	var was tsubame.CampaignObject
	if err == nil {
		c.mu.Lock()
		// What it was, for the audit line to say what changed (another
		// node's write in between shows in its own line).
		if was, err = c.store.GetObject(r.Context(), k, id); tsubame.ErrorCode(err) == tsubame.ENOTFOUND {
			was, err = nil, nil
		}
		if err == nil {
			err = c.store.PutObject(r.Context(), o)
		}
		c.mu.Unlock()
	}
	if err != nil {
		c.done(w, r, k.String()+".put", id, err)
		return
	}
	c.s.audit(r, identityOf(r).actor, k.String()+".put", id, "ok", clipDetail(changedFields(was, o)))
	writeJSON(w, http.StatusOK, o)
}

// changedFields says what a put changed of an object, field by field in
// the JSON's names and values ("created" for a new one, "no change" for
// the same): weight: 1 → 5; cpm: "1200" → "1250.5".
func changedFields(was, now tsubame.CampaignObject) string {
	if was == nil {
		return "created"
	}
	fields := func(o tsubame.CampaignObject) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		b, _ := json.Marshal(o) // objects always encode
		_ = json.Unmarshal(b, &m)
		return m
	}
	a, b := fields(was), fields(now)
	names := make([]string, 0, len(a)+len(b))
	for n := range a {
		names = append(names, n)
	}
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var out []string
	for _, n := range names {
		x, y := a[n], b[n]
		if bytes.Equal(x, y) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s → %s", n, cmp.Or(string(x), "(none)"), cmp.Or(string(y), "(none)")))
	}
	if len(out) == 0 {
		return "no change"
	}
	return strings.Join(out, "; ")
}

// clipDetail bounds an audit line's detail to maxAuditDetail bytes, at a
// character's start.
func clipDetail(s string) string {
	if len(s) <= maxAuditDetail {
		return s
	}
	cut := maxAuditDetail - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// maxHistory bounds ?limit= of an object's history.
const maxHistory = 500

// history answers the changes of the object of kind k with the path's id
// that the audit log holds, newest first: every write of it that went
// through (its put and delete; its status verbs, statusActions), who made
// it and when. ?limit=N (1..500, default 50). The audit log is this
// node's, which its command line shares: with several nodes, each lists
// the changes made through it (their syslog copies hold them all), and an
// import is one line for all the objects of its file, not one per object.
func (c *campaignAPI) history(w http.ResponseWriter, r *http.Request, k tsubame.CampaignKind) {
	id := r.PathValue("id")
	err := checkObjectID(k, id)
	limit := 50
	if v := r.URL.Query().Get("limit"); err == nil && v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 || n > maxHistory {
			err = tsubame.Errorf(tsubame.EINVALID, "limit must be 1 to %d", maxHistory)
		}
		limit = n
	}
	if err != nil {
		c.s.writeStoreError(w, err)
		return
	}
	actions := map[string]bool{k.String() + ".put": true, k.String() + ".delete": true}
	for _, a := range statusActions[k] {
		actions[a] = true
	}
	// Ids are letters, digits and -_.:@, which JSON writes as they are.
	recs, complete, err := c.s.auditLog.Find(`"target":"`+id+`"`, func(rec *AuditRecord) bool {
		return rec.Target == id && rec.Result == "ok" && actions[rec.Action]
	}, limit)
	if err != nil {
		c.s.writeStoreError(w, tsubame.WrapError(tsubame.EINTERNAL, err, "cannot read the audit log"))
		return
	}
	type change struct {
		Time   time.Time `json:"time"`
		Actor  string    `json:"actor"`
		Remote string    `json:"remote,omitempty"`
		Action string    `json:"action"`
		Detail string    `json:"detail,omitempty"` // what a put changed
	}
	out := make([]change, 0, len(recs))
	for i := len(recs) - 1; i >= 0; i-- {
		rec := recs[i]
		out = append(out, change{Time: rec.Time, Actor: rec.Actor, Remote: rec.Remote, Action: rec.Action, Detail: rec.Detail})
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": k.String(), "id": id, "changes": out, "complete": complete})
}

// delete removes the object of kind k with the path's id; one that others
// use is refused (ECONFLICT) naming them.
func (c *campaignAPI) delete(w http.ResponseWriter, r *http.Request, k tsubame.CampaignKind) {
	id := r.PathValue("id")
	err := checkObjectID(k, id)
	if err == nil {
		c.mu.Lock()
		err = c.store.DeleteObject(r.Context(), k, id)
		c.mu.Unlock()
	}
	if c.done(w, r, k.String()+".delete", id, err) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// setStatus pauses or resumes a line item and answers it.
func (c *campaignAPI) setStatus(w http.ResponseWriter, r *http.Request, action, status string) {
	id := r.PathValue("id")
	var li *tsubame.LineItem
	err := checkObjectID(tsubame.KindLineItem, id)
	if err == nil {
		c.mu.Lock()
		li, err = c.writeStatus(r.Context(), id, status)
		c.mu.Unlock()
	}
	if c.done(w, r, action, id, err) {
		writeJSON(w, http.StatusOK, li)
	}
}

// writeStatus sets the status of line item id, written at the version it
// was read at: an edit of it on another node in between is kept, never
// overwritten with what this read. c.mu held.
func (c *campaignAPI) writeStatus(ctx context.Context, id, status string) (*tsubame.LineItem, error) {
	for range statusAttempts {
		// The version first: a write after it, before or after the line
		// item's read, fails the PutObjectAt.
		version, err := c.store.CampaignsVersion(ctx)
		if err != nil {
			return nil, err
		}
		li, err := tsubame.GetCampaignObject[*tsubame.LineItem](ctx, c.store, id)
		if err != nil || li.Status == status {
			return li, err
		}
		li.Status = status
		err = c.store.PutObjectAt(ctx, li, version)
		if tsubame.ErrorCode(err) != tsubame.ECONFLICT {
			return li, err
		}
	}
	return nil, tsubame.Errorf(tsubame.ECONFLICT, "the campaigns kept changing while line item %q was written (%d attempts): try again", id, statusAttempts)
}

// importSet writes a campaign file, all or nothing: ?mode=merge (the
// default) puts the file's objects into the stored set, ?mode=replace makes
// the stored set the file's. The result is checked as a whole and every
// problem answered (400) before anything is written; then one ReplaceAllAt
// writes it, at the version the set was read at (409 when another node
// wrote meanwhile). The format is ?format=json|yaml, else the Content-Type's
// (application/json; application/yaml, text/yaml and their x- forms), else
// sniffed. The problems name the file ?name= (the client's file name, as
// `tsubame campaigns import` gives it), else "body".
func (c *campaignAPI) importSet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	mode := q.Get("mode")
	var err error
	switch mode {
	case "":
		mode = "merge"
	case "merge", "replace":
	default:
		err = tsubame.Errorf(tsubame.EINVALID, "mode must be merge or replace")
	}
	name := "body"
	if q.Has("name") && err == nil {
		name = q.Get("name")
		err = checkFileLabel(name)
	}
	format := bulk.CampaignsAuto
	if err == nil {
		format, err = importFormat(q.Get("format"), r.Header.Get("Content-Type"))
	}
	var file *bulk.CampaignFile
	if err == nil {
		// The request's context: a client gone stops the work (a YAML
		// file's merge keys can ask for much of it).
		file, err = bulk.ReadCampaignsContext(r.Context(), http.MaxBytesReader(w, r.Body, c.s.opt.MaxImportBytes), name, format)
		if _, ok := errors.AsType[*tsubame.Error](err); !ok { // not the file's problems nor the context's: reading the body failed
			err = bodyError(err, c.s.opt.MaxImportBytes, "admin.max_import_bytes")
		}
	}
	var set *tsubame.CampaignSet
	if err == nil {
		c.mu.Lock()
		set, err = c.replace(r, file, mode == "replace")
		c.mu.Unlock()
	}
	target := mode
	if file != nil {
		target += ": " + bulk.DescribeCounts(bulk.CampaignCounts(file.Set))
	}
	if c.done(w, r, "campaigns.import", target, err) {
		writeJSON(w, http.StatusOK, map[string]any{"mode": mode, "imported": bulk.CampaignCounts(file.Set),
			"stored": bulk.CampaignCounts(set)})
	}
}

// replace resolves file against the stored set and writes the result at
// the version it read (bulk.CampaignFile.Write): it never undoes a write
// it did not see, and keeps those of other nodes it does not conflict
// with. c.mu held.
func (c *campaignAPI) replace(r *http.Request, file *bulk.CampaignFile, replace bool) (*tsubame.CampaignSet, error) {
	return file.Write(r.Context(), c.store, replace)
}

// maxFileLabel bounds an import's ?name=.
const maxFileLabel = 1024

// checkFileLabel checks a file name a client gives for its problems to
// name: text that prints as one line.
func checkFileLabel(name string) error {
	ok := name != "" && len(name) <= maxFileLabel && utf8.ValidString(name)
	for _, r := range name {
		ok = ok && !unicode.IsControl(r)
	}
	if !ok {
		return tsubame.Errorf(tsubame.EINVALID, "name must be 1 to %d bytes of text without control characters", maxFileLabel)
	}
	return nil
}

// importFormat picks a campaign file's format from ?format= or the
// Content-Type.
func importFormat(param, contentType string) (bulk.CampaignFormat, error) {
	if param != "" {
		f, err := bulk.ParseCampaignFormat(param)
		if err != nil {
			return "", tsubame.WrapError(tsubame.EINVALID, err, "%v", err)
		}
		return f, nil
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "application/json":
		return bulk.CampaignsJSON, nil
	case "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml":
		return bulk.CampaignsYAML, nil
	case "text/csv":
		return bulk.CampaignsCSV, nil
	}
	return bulk.CampaignsAuto, nil
}

// export answers the stored set as a campaign file: JSON, or YAML with
// ?format=yaml.
func (c *campaignAPI) export(w http.ResponseWriter, r *http.Request) {
	format, err := bulk.ParseCampaignFormat(r.URL.Query().Get("format"))
	if err != nil {
		c.s.writeStoreError(w, tsubame.WrapError(tsubame.EINVALID, err, "%v", err))
		return
	}
	set, _, err := c.store.Snapshot(r.Context())
	if err != nil {
		c.s.writeStoreError(w, err)
		return
	}
	var buf bytes.Buffer
	if err := bulk.WriteCampaigns(&buf, set, format); err != nil {
		if tsubame.ErrorCode(err) != tsubame.EINVALID { // EINVALID: a line item CSV cannot hold
			err = fmt.Errorf("cannot write the campaign file: %w", err)
		}
		c.s.writeStoreError(w, err)
		return
	}
	ctype := "application/json"
	switch format {
	case bulk.CampaignsYAML:
		ctype = "application/yaml; charset=utf-8"
	case bulk.CampaignsCSV:
		ctype = "text/csv; charset=utf-8"
		w.Header().Set("Content-Disposition", `attachment; filename="line-items.csv"`)
	}
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

// budgets answers GET /api/v1/budgets: {"budgets": [...]}, every budget and
// impression limit of the stored campaigns with what the store holds of it.
func (c *campaignAPI) budgets(w http.ResponseWriter, r *http.Request) {
	if c.s.opt.Budgets == nil {
		c.s.writeStoreError(w, errNoCampaignStore)
		return
	}
	v, err := c.s.opt.Budgets(r.Context())
	if err != nil {
		c.s.writeStoreError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"budgets": v})
}
