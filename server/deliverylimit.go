package server

import (
	"net/http"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// The routes of delivery limits (api.RouteLimits and after) need an engine that is a
// queue.Limiter; for any other they answer 501.

var errNotLimiter = &requestError{status: http.StatusNotImplemented, msg: "this server's engine has no delivery limits " +
	"(it does not implement queue.Limiter)"}

func (s *Server) limiterOf() (queue.Limiter, error) {
	if s.limiter == nil {
		return nil, errNotLimiter
	}
	return s.limiter, nil
}

func (s *Server) handleLimits(w http.ResponseWriter, r *http.Request) error {
	l, err := s.limiterOf()
	if err != nil {
		return err
	}
	ls, err := l.Limits(r.Context())
	if err != nil {
		return err
	}
	out := api.LimitsResponse{Limits: make([]api.Limit, len(ls))}
	for i, tl := range ls {
		out.Limits[i] = limitOf(tl)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// limitOf returns tl for the wire.
func limitOf(tl queue.TopicLimit) api.Limit {
	return api.Limit{Topic: tl.Topic, Rate: tl.Rate, Burst: tl.Burst, Concurrency: tl.Concurrency}
}

// handleSetLimit sets a topic's limit and answers it as kept, its default burst filled in. A
// zero limit removes it, as DELETE does.
func (s *Server) handleSetLimit(w http.ResponseWriter, r *http.Request) error {
	l, err := s.limiterOf()
	if err != nil {
		return err
	}
	var req api.Limit
	topic, err := s.decodeTopicRequest(w, r, adminBodyLimit, &req, false)
	if err != nil {
		return err
	}
	if req.Topic != "" && req.Topic != topic {
		return badRequest("field \"topic\" %q is not the topic of the path, %q: leave it out", truncate(req.Topic), truncate(topic))
	}
	lim, err := queue.Limit{Rate: req.Rate, Burst: req.Burst, Concurrency: req.Concurrency}.Check()
	if err != nil {
		return badRequest("%s", err.Error())
	}
	if err := l.SetLimit(r.Context(), topic, lim); err != nil {
		return err
	}
	s.metrics.admin("limit", 0)
	s.log.Info("admin: limit", "topic", topic, "rate", lim.Rate, "burst", lim.Burst, "concurrency", lim.Concurrency)
	writeJSON(w, http.StatusOK, limitOf(queue.TopicLimit{Topic: topic, Limit: lim}))
	return nil
}

func (s *Server) handleRemoveLimit(w http.ResponseWriter, r *http.Request) error {
	l, err := s.limiterOf()
	if err != nil {
		return err
	}
	topic := r.PathValue("topic")
	if err := checkTopic(topic); err != nil {
		return err
	}
	if err := l.SetLimit(r.Context(), topic, queue.Limit{}); err != nil {
		return err
	}
	s.metrics.admin("limit", 0)
	s.log.Info("admin: limit removed", "topic", topic)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// topicLimits returns the limits of the engine by topic, or nil when it has none.
func (s *Server) topicLimits(r *http.Request) (map[string]*api.Limit, error) {
	if s.limiter == nil {
		return nil, nil
	}
	ls, err := s.limiter.Limits(r.Context())
	if err != nil {
		return nil, err
	}
	out := make(map[string]*api.Limit, len(ls))
	for _, tl := range ls {
		l := limitOf(tl)
		l.Topic = ""
		out[tl.Topic] = &l
	}
	return out, nil
}
