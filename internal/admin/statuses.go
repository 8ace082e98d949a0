package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"tsubame"
)

// The status verbs of the campaign API beside a line item's pause and
// resume: a creative's review (approve, reject with a reason), a
// campaign's pause, archive and resume, an advertiser's archive and
// resume, a creative's archive and restore and a line item's archive,
// each an editor's write audited as creative.approve, creative.reject,
// creative.archive, creative.restore, campaign.pause, campaign.archive,
// campaign.resume, advertiser.archive, advertiser.resume or
// line_item.archive and listed in the object's history; and ?status= on
// the lists, for the approval queue (GET /api/v1/creatives?status=pending).
// The lists leave the archived out unless ?status= asks for them
// (archived, or all). A creative's archiving is apart from its review,
// which it keeps: ?status=pending lists the pending creatives not
// archived, and an archived one may still be approved or rejected.

// maxReviewBody bounds a rejection's body: a reason of at most
// tsubame.MaxReasonLength bytes, each escaped in JSON at worst to six.
const maxReviewBody = 8 << 10

// statusActions are the actions of each kind's status verbs, which its
// history lists beside its puts and deletes.
var statusActions = map[tsubame.CampaignKind][]string{
	tsubame.KindAdvertiser: {"advertiser.archive", "advertiser.resume"},
	tsubame.KindCampaign:   {"campaign.pause", "campaign.resume", "campaign.archive"},
	tsubame.KindCreative:   {"creative.approve", "creative.reject", "creative.archive", "creative.restore"},
	tsubame.KindLineItem:   {"line_item.pause", "line_item.resume", "line_item.archive"},
}

// statusRoutes adds the status verbs; editor wraps a handler in the
// editor role's check.
func (c *campaignAPI) statusRoutes(mux *http.ServeMux, editor func(http.HandlerFunc) http.HandlerFunc) {
	mux.HandleFunc("POST /api/v1/creatives/{id}/approve", editor(c.approve))
	mux.HandleFunc("POST /api/v1/creatives/{id}/reject", editor(c.reject))
	mux.HandleFunc("POST /api/v1/creatives/{id}/archive", editor(func(w http.ResponseWriter, r *http.Request) {
		c.setCreativeArchived(w, r, "creative.archive", true)
	}))
	mux.HandleFunc("POST /api/v1/creatives/{id}/restore", editor(func(w http.ResponseWriter, r *http.Request) {
		c.setCreativeArchived(w, r, "creative.restore", false)
	}))
	mux.HandleFunc("POST /api/v1/line-items/{id}/archive", editor(func(w http.ResponseWriter, r *http.Request) {
		c.setStatus(w, r, "line_item.archive", tsubame.StatusArchived) // resume makes it active again
	}))
	mux.HandleFunc("POST /api/v1/campaigns/{id}/pause", editor(func(w http.ResponseWriter, r *http.Request) {
		c.setCampaignStatus(w, r, "campaign.pause", tsubame.StatusPaused)
	}))
	mux.HandleFunc("POST /api/v1/campaigns/{id}/resume", editor(func(w http.ResponseWriter, r *http.Request) {
		c.setCampaignStatus(w, r, "campaign.resume", "") // active, the default
	}))
	mux.HandleFunc("POST /api/v1/campaigns/{id}/archive", editor(func(w http.ResponseWriter, r *http.Request) {
		c.setCampaignStatus(w, r, "campaign.archive", tsubame.StatusArchived) // resume makes it active again
	}))
	mux.HandleFunc("POST /api/v1/advertisers/{id}/archive", editor(func(w http.ResponseWriter, r *http.Request) {
		c.setAdvertiserStatus(w, r, "advertiser.archive", tsubame.StatusArchived)
	}))
	mux.HandleFunc("POST /api/v1/advertisers/{id}/resume", editor(func(w http.ResponseWriter, r *http.Request) {
		c.setAdvertiserStatus(w, r, "advertiser.resume", "") // active, the default
	}))
}

// approve marks a creative approved (its rejection's reason cleared): the
// line items naming it may serve it from the next index. The body, if
// any, is ignored.
func (c *campaignAPI) approve(w http.ResponseWriter, r *http.Request) {
	c.review(w, r, "creative.approve", tsubame.StatusApproved, "")
}

// reject marks a creative rejected, with the reason the body gives
// ({"reason": "..."}, required): it serves nowhere until approved.
func (c *campaignAPI) reject(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reason string `json:"reason"`
	}
	b, err := readBody(w, r, maxReviewBody, "")
	if err == nil && len(bytes.TrimSpace(b)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if derr := dec.Decode(&body); derr != nil {
			err = tsubame.Errorf(tsubame.EINVALID, "request body: %v", derr)
		}
	}
	body.Reason = strings.TrimSpace(body.Reason)
	if err == nil && body.Reason == "" {
		err = tsubame.Errorf(tsubame.EINVALID, `a rejection needs its reason: {"reason": "..."}, for the advertiser to fix the creative`)
	}
	if err != nil {
		c.done(w, r, "creative.reject", r.PathValue("id"), err)
		return
	}
	c.review(w, r, "creative.reject", tsubame.StatusRejected, body.Reason)
}

// review sets the status and reason of the creative with the path's id
// and answers it; the audit line says what the status was and the reason.
func (c *campaignAPI) review(w http.ResponseWriter, r *http.Request, action, status, reason string) {
	id := r.PathValue("id")
	var was string
	o, err := c.rewrite(r.Context(), tsubame.KindCreative, id, func(o tsubame.CampaignObject) bool {
		cr := o.(*tsubame.Creative)
		was = creativeStatus(cr)
		if cr.Status == status && cr.Reason == reason {
			return false
		}
		cr.Status, cr.Reason = status, reason
		return true
	})
	if err != nil {
		c.done(w, r, action, id, err)
		return
	}
	detail := was + " → " + status
	if reason != "" {
		detail += ": " + reason
	}
	c.s.audit(r, identityOf(r).actor, action, id, "ok", clipDetail(detail))
	writeJSON(w, http.StatusOK, o)
}

// setCreativeArchived archives or restores the creative with the path's
// id and answers it: an archived creative serves nowhere, whatever its
// review, which both leave as it was (an approved creative restored
// serves again). The audit line says the review it keeps.
func (c *campaignAPI) setCreativeArchived(w http.ResponseWriter, r *http.Request, action string, archived bool) {
	id := r.PathValue("id")
	var review string
	o, err := c.rewrite(r.Context(), tsubame.KindCreative, id, func(o tsubame.CampaignObject) bool {
		cr := o.(*tsubame.Creative)
		review = creativeStatus(cr)
		if cr.Archived == archived {
			return false
		}
		cr.Archived = archived
		return true
	})
	if err != nil {
		c.done(w, r, action, id, err)
		return
	}
	c.s.audit(r, identityOf(r).actor, action, id, "ok", "review "+review)
	writeJSON(w, http.StatusOK, o)
}

// setCampaignStatus pauses, archives or resumes the campaign with the
// path's id and answers it: none of a paused or archived campaign's line
// items serves, whatever their own status, which a resume leaves as it
// was.
func (c *campaignAPI) setCampaignStatus(w http.ResponseWriter, r *http.Request, action, status string) {
	id := r.PathValue("id")
	o, err := c.rewrite(r.Context(), tsubame.KindCampaign, id, func(o tsubame.CampaignObject) bool {
		camp := o.(*tsubame.Campaign)
		if camp.Status == status {
			return false
		}
		camp.Status = status
		return true
	})
	if c.done(w, r, action, id, err) {
		writeJSON(w, http.StatusOK, o)
	}
}

// setAdvertiserStatus archives or resumes the advertiser with the path's
// id and answers it: none of an archived advertiser's campaigns serves,
// whatever their own status, which a resume leaves as it was.
func (c *campaignAPI) setAdvertiserStatus(w http.ResponseWriter, r *http.Request, action, status string) {
	id := r.PathValue("id")
	o, err := c.rewrite(r.Context(), tsubame.KindAdvertiser, id, func(o tsubame.CampaignObject) bool {
		a := o.(*tsubame.Advertiser)
		if a.Status == status {
			return false
		}
		a.Status = status
		return true
	})
	if c.done(w, r, action, id, err) {
		writeJSON(w, http.StatusOK, o)
	}
}

// rewrite reads the object of kind k with the given id, lets change
// change it (false: nothing to write) and writes it at the version it was
// read at, reading it again when another node wrote in between (as
// writeStatus does for a line item). It takes c.mu.
func (c *campaignAPI) rewrite(ctx context.Context, k tsubame.CampaignKind, id string, change func(tsubame.CampaignObject) bool) (tsubame.CampaignObject, error) {
	if err := checkObjectID(k, id); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for range statusAttempts {
		version, err := c.store.CampaignsVersion(ctx)
		if err != nil {
			return nil, err
		}
		o, err := c.store.GetObject(ctx, k, id)
		if err != nil || !change(o) {
			return o, err
		}
		err = c.store.PutObjectAt(ctx, o, version)
		if tsubame.ErrorCode(err) != tsubame.ECONFLICT {
			return o, err
		}
	}
	return nil, tsubame.Errorf(tsubame.ECONFLICT, "the campaigns kept changing while %s %q was written (%d attempts): try again", k, id, statusAttempts)
}

// creativeStatus is a creative's status, pending when it has none.
func creativeStatus(c *tsubame.Creative) string {
	if c.Status == "" {
		return tsubame.StatusPending
	}
	return c.Status
}

// objectStatus is the status an object of a kind that has one is in (the
// default when it names none; archived for an archived creative); false
// for a kind without.
func objectStatus(o tsubame.CampaignObject) (string, bool) {
	status := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	switch o := o.(type) {
	case *tsubame.Advertiser:
		return status(o.Status, tsubame.StatusActive), true
	case *tsubame.Creative:
		if o.Archived { // apart from its review, which it keeps
			return tsubame.StatusArchived, true
		}
		return creativeStatus(o), true
	case *tsubame.Campaign:
		return status(o.Status, tsubame.StatusActive), true
	case *tsubame.LineItem:
		return status(o.Status, tsubame.StatusActive), true
	}
	return "", false
}

// statuses are the statuses ?status= takes, by kind.
var statuses = map[tsubame.CampaignKind][]string{
	tsubame.KindAdvertiser: {tsubame.StatusActive, tsubame.StatusArchived},
	tsubame.KindCampaign:   {tsubame.StatusActive, tsubame.StatusPaused, tsubame.StatusArchived},
	tsubame.KindCreative:   {tsubame.StatusPending, tsubame.StatusApproved, tsubame.StatusRejected, tsubame.StatusArchived},
	tsubame.KindLineItem:   {tsubame.StatusActive, tsubame.StatusPaused, tsubame.StatusArchived},
}

// statusAll is the ?status= that lists every object, archived ones too.
const statusAll = "all"

// filterStatus keeps the objects in the status ?status= names, if it
// names one: a kind's default status (a creative's pending, a line item's
// active) matches the objects that name none, and an archived creative
// is in archived alone, not in its review's status. Without one, every
// object but the archived; with all, every object.
func filterStatus(r *http.Request, k tsubame.CampaignKind, objs []tsubame.CampaignObject) ([]tsubame.CampaignObject, error) {
	q := r.URL.Query()
	want, known := q.Get("status"), statuses[k]
	if !q.Has("status") && slices.Contains(known, tsubame.StatusArchived) {
		return slices.DeleteFunc(objs, func(o tsubame.CampaignObject) bool {
			s, _ := objectStatus(o)
			return s == tsubame.StatusArchived
		}), nil
	}
	if !q.Has("status") || want == statusAll && len(known) > 0 {
		return objs, nil
	}
	ok := false
	for _, s := range known {
		ok = ok || s == want
	}
	if !ok {
		if len(known) == 0 {
			return nil, tsubame.Errorf(tsubame.EINVALID, "%s have no status to filter by", k.Plural())
		}
		return nil, tsubame.Errorf(tsubame.EINVALID, "status must be one of %s, %s", strings.Join(known, ", "), statusAll)
	}
	out := make([]tsubame.CampaignObject, 0, len(objs))
	for _, o := range objs {
		if s, _ := objectStatus(o); s == want {
			out = append(out, o)
		}
	}
	return out, nil
}
