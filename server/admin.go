package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// The routes that operate the queue (api.RouteTopics and those after it) need an engine that is a
// queue.Admin; for any other they answer 501, and the rest of the API works as before.

// adminBodyLimit bounds the body of an admin action: a requeue of api.MaxPage IDs of MaxNameLen
// bytes fits with room to spare.
const adminBodyLimit = 256 << 10

// maxCursorLen bounds the cursor a page request may send; engines' cursors are far shorter.
const maxCursorLen = 1024

// maxLoggedIDs is how many IDs of an action the log names; it counts the rest.
const maxLoggedIDs = 10

// errNotAdmin answers the admin routes of an engine that is not a queue.Admin.
var errNotAdmin = &requestError{status: http.StatusNotImplemented, msg: "this server's engine cannot be operated: " +
	"it lists no topics or messages and takes no admin actions (it does not implement queue.Admin)"}

// pageQuery returns the cursor and the limit of a page's query: api.QueryCursor, at most
// maxCursorLen bytes, and api.QueryLimit, from 1 to queue.MaxPage (api.DefaultPage when absent).
func pageQuery(q url.Values) (cursor string, limit int, err error) {
	limit = api.DefaultPage
	if v := q.Get(api.QueryLimit); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > queue.MaxPage {
			return "", 0, badRequest("query parameter %q must be an integer from 1 to %d", api.QueryLimit, queue.MaxPage)
		}
		limit = n
	}
	cursor = q.Get(api.QueryCursor)
	if len(cursor) > maxCursorLen {
		return "", 0, badRequest("query parameter %q is longer than %d bytes: pass the \"next\" of the previous page", api.QueryCursor, maxCursorLen)
	}
	return cursor, limit, nil
}

// adminOf returns the engine as a queue.Admin, or the error that answers a route needing one.
func (s *Server) adminOf() (queue.Admin, error) {
	if s.admin == nil {
		return nil, errNotAdmin
	}
	return s.admin, nil
}

func (s *Server) handleTopics(w http.ResponseWriter, r *http.Request) error {
	a, err := s.adminOf()
	if err != nil {
		return err
	}
	ts, err := a.Topics(r.Context())
	if err != nil {
		return err
	}
	limits, err := s.topicLimits(r)
	if err != nil {
		return err
	}
	rates := s.rates.sample(s.now(), ts)
	out := api.TopicsResponse{Topics: make([]api.Topic, len(ts))}
	for i, t := range ts {
		out.Topics[i] = api.Topic{
			Topic: t.Topic, Scheduled: t.Scheduled, Due: t.Due, Leased: t.Leased, Dead: t.Dead,
			OldestDue: t.OldestDue.UTC(), Paused: t.Paused,
			Puts: t.Puts, Deliveries: t.Deliveries, Acks: t.Acks,
			Rate: rates[i], Limit: limits[t.Topic],
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) error {
	a, err := s.adminOf()
	if err != nil {
		return err
	}
	topic := r.PathValue("topic")
	if err := checkTopic(topic); err != nil {
		return err
	}
	q := r.URL.Query()
	state, err := parseState(q.Get(api.QueryState), true)
	if err != nil {
		return err
	}
	cursor, limit, err := pageQuery(q)
	if err != nil {
		return err
	}
	page, next, err := a.Messages(r.Context(), topic, state, cursor, limit)
	if err != nil {
		return err
	}
	out := api.MessagesResponse{Messages: make([]api.MessageInfo, len(page)), Next: next}
	for i := range page {
		out.Messages[i] = messageInfo(&page[i])
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// parseState returns the state named by s, one of the four of queue.State, or the three a purge
// takes when leased is false.
func parseState(s string, leased bool) (queue.State, error) {
	st := queue.State(s)
	if st.Valid() && (leased || st != queue.Leased) {
		return st, nil
	}
	if !leased {
		if s == "" {
			return "", badRequest("field \"state\" is required: scheduled, due or dead")
		}
		return "", badRequest("field \"state\": %q is not scheduled, due or dead (leased messages belong to their consumers)", truncate(s))
	}
	if s == "" {
		return "", badRequest("query parameter %q is required: scheduled, due, leased or dead", api.QueryState)
	}
	return "", badRequest("query parameter %q: %q is not scheduled, due, leased or dead", api.QueryState, truncate(s))
}

// messageInfo returns m for the wire, with a preview of its payload.
func messageInfo(m *queue.MessageInfo) api.MessageInfo {
	preview, truncated := previewOf(m.Payload, m.Size)
	return api.MessageInfo{
		ID: m.ID, Topic: m.Topic, State: string(m.State),
		DeliverAt:   m.DeliverAt.UTC(),
		Attempts:    m.Attempts,
		LastFailure: m.LastFailure, FailedAt: m.FailedAt.UTC(), Reason: m.Reason,
		LeaseDeadline: m.LeaseDeadline.UTC(),
		Size:          m.Size,
		Preview:       preview, Truncated: truncated,
		Headers: m.Headers,
	}
}

// previewOf returns the first queue.PreviewLen bytes of a payload of size bytes, p or its
// beginning, as valid UTF-8, and whether the payload is longer. A character that the cut splits
// is left out rather than shown as a replacement character.
func previewOf(p []byte, size int) (string, bool) {
	truncated := size > len(p) || len(p) > queue.PreviewLen
	p = p[:min(len(p), queue.PreviewLen)]
	if truncated {
		// Drop a last character the cut left incomplete: at most UTFMax-1 bytes of one.
		for i := 1; i < utf8.UTFMax && i <= len(p); i++ {
			if utf8.RuneStart(p[len(p)-i]) {
				if !utf8.FullRune(p[len(p)-i:]) {
					p = p[:len(p)-i]
				}
				break
			}
		}
	}
	return strings.ToValidUTF8(string(p), "\uFFFD"), truncated
}

func (s *Server) handleMessage(w http.ResponseWriter, r *http.Request) error {
	a, err := s.adminOf()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := checkID("id", id); err != nil {
		return err
	}
	m, err := a.Message(r.Context(), id)
	if err != nil {
		return err
	}
	out := messageInfo(&m)
	out.Payload = payloadJSON(m.Payload)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// decodeAdminBody decodes the body of an admin action into req; an empty body is the zero value
// when allowEmpty is set.
func (s *Server) decodeAdminBody(w http.ResponseWriter, r *http.Request, req any, allowEmpty bool) error {
	return s.decodeBody(w, r, adminBodyLimit, req, allowEmpty)
}

func (s *Server) handleDeliver(w http.ResponseWriter, r *http.Request) error {
	a, err := s.adminOf()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := checkID("id", id); err != nil {
		return err
	}
	if err := s.decodeAdminBody(w, r, &struct{}{}, true); err != nil {
		return err
	}
	ok, err := a.DeliverNow(r.Context(), id)
	if err != nil {
		return err
	}
	if !ok {
		return &requestError{status: http.StatusNotFound, code: api.CodeNotFound, msg: fmt.Sprintf("no scheduled message %q", id)}
	}
	s.metrics.admin("deliver", 1)
	s.log.Info("admin: deliver now", "id", id, "count", 1)
	writeJSON(w, http.StatusOK, api.MovedResponse{Moved: 1})
	return nil
}

func (s *Server) handleRequeue(w http.ResponseWriter, r *http.Request) error {
	a, err := s.adminOf()
	if err != nil {
		return err
	}
	var req api.RequeueRequest
	topic, err := s.decodeTopicRequest(w, r, adminBodyLimit, &req, false)
	if err != nil {
		return err
	}
	switch {
	case req.All && req.IDs != nil:
		return badRequest("give either \"ids\" or \"all\", not both")
	case !req.All && len(req.IDs) == 0:
		return badRequest("name the dead letters to requeue with \"ids\", or requeue every one with \"all\": true")
	case len(req.IDs) > queue.MaxPage:
		return tooLarge("a requeue names at most %d IDs, not %d; requeue every dead letter with \"all\": true", queue.MaxPage, len(req.IDs))
	}
	for i, id := range req.IDs {
		if err := checkID(fmt.Sprintf("ids[%d]", i), id); err != nil {
			return err
		}
	}
	n, err := a.Requeue(r.Context(), topic, req.IDs...)
	if err != nil {
		return err
	}
	s.metrics.admin("requeue", n)
	if req.All {
		s.log.Info("admin: requeue", "topic", topic, "all", true, "count", n)
	} else {
		s.log.Info("admin: requeue", "topic", topic, "ids", loggedIDs(req.IDs), "count", n)
	}
	writeJSON(w, http.StatusOK, api.MovedResponse{Moved: n})
	return nil
}

// loggedIDs returns ids for a log line: the first maxLoggedIDs, and a count of the rest.
func loggedIDs(ids []string) string {
	if len(ids) <= maxLoggedIDs {
		return strings.Join(ids, ",")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:maxLoggedIDs], ","), len(ids)-maxLoggedIDs)
}

func (s *Server) handlePurge(w http.ResponseWriter, r *http.Request) error {
	a, err := s.adminOf()
	if err != nil {
		return err
	}
	var req api.PurgeRequest
	topic, err := s.decodeTopicRequest(w, r, adminBodyLimit, &req, false)
	if err != nil {
		return err
	}
	state, err := parseState(req.State, false)
	if err != nil {
		return err
	}
	n, err := a.Purge(r.Context(), topic, state)
	if err != nil {
		return err
	}
	s.metrics.admin("purge", n)
	s.log.Info("admin: purge", "topic", topic, "state", string(state), "count", n)
	writeJSON(w, http.StatusOK, api.PurgeResponse{Removed: n})
	return nil
}

func (s *Server) handlePause(w http.ResponseWriter, r *http.Request) error {
	return s.setPaused(w, r, true)
}

func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) error {
	return s.setPaused(w, r, false)
}

func (s *Server) setPaused(w http.ResponseWriter, r *http.Request, paused bool) error {
	a, err := s.adminOf()
	if err != nil {
		return err
	}
	topic, err := s.decodeTopicRequest(w, r, adminBodyLimit, &struct{}{}, true)
	if err != nil {
		return err
	}
	action := "resume"
	if paused {
		action = "pause"
		err = a.Pause(r.Context(), topic)
	} else {
		err = a.Resume(r.Context(), topic)
	}
	if err != nil {
		return err
	}
	s.metrics.admin(action, 0)
	s.log.Info("admin: "+action, "topic", topic)
	writeJSON(w, http.StatusOK, api.PauseResponse{Topic: topic, Paused: paused})
	return nil
}
