package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/schedule"
)

// The routes of schedules need an engine that is a queue.Scheduler; for any other they answer 501.

// scheduleBodyLimit bounds the body of a schedule's set beyond its payload.
const scheduleBodyLimit = 16 << 10

var errNotScheduler = &requestError{status: http.StatusNotImplemented, msg: "this server's engine keeps no schedules " +
	"(it does not implement queue.Scheduler)"}

func (s *Server) routeSchedules() {
	s.route(api.RouteSetSchedule, s.handleSetSchedule)
	s.route(api.RouteSchedules, s.handleSchedules)
	s.route(api.RouteSchedule, s.handleSchedule)
	s.route(api.RouteDeleteSchedule, s.handleDeleteSchedule)
	s.route(api.RoutePauseSchedule, s.handlePauseSchedule)
	s.route(api.RouteResumeSchedule, s.handleResumeSchedule)
	s.route(api.RouteTriggerSchedule, s.handleTriggerSchedule)
}

// schedulerOf returns the engine as a queue.Scheduler, and the schedule's name in r's path,
// checked; or the error that answers the request.
func (s *Server) schedulerOf(r *http.Request) (queue.Scheduler, string, error) {
	sc, ok := s.engine.(queue.Scheduler)
	if !ok {
		return nil, "", errNotScheduler
	}
	name := r.PathValue("name")
	if name == "" && r.Pattern == api.RouteSchedules {
		return sc, "", nil
	}
	if err := schedule.CheckName(name); err != nil {
		return nil, "", badRequest("%v", err)
	}
	return sc, name, nil
}

func (s *Server) handleSetSchedule(w http.ResponseWriter, r *http.Request) error {
	sc, name, err := s.schedulerOf(r)
	if err != nil {
		return err
	}
	var req api.ScheduleRequest
	if err := s.decodeBody(w, r, s.limits.bodyLimit()+scheduleBodyLimit, &req, false); err != nil {
		return err
	}
	if err := checkTopic(req.Topic); err != nil {
		return badRequest("field \"topic\": %v", err)
	}
	// The payload is checked and compacted as a put's is.
	m, err := toMessage(&api.PutRequest{Payload: req.Payload}, s.now(), s.limits.MaxPayload)
	if err != nil {
		return err
	}
	q := queue.Schedule{Name: name, Topic: req.Topic, Spec: req.Spec, TimeZone: req.TimeZone,
		Misfire: queue.Misfire(req.Misfire), Overlap: queue.Overlap(req.Overlap), Payload: m.Payload}
	// The engine checks the same, but the answer names the field as the API spells it.
	if _, err := schedule.Check(q, s.now()); err != nil {
		return badRequest("field %v", err)
	}
	created, err := sc.SetSchedule(r.Context(), q)
	if err != nil {
		return err
	}
	s.metrics.admin("set_schedule", 0)
	info, err := sc.Schedule(r.Context(), name)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, toAPISchedule(info))
	return nil
}

func toAPISchedule(i queue.ScheduleInfo) api.Schedule {
	out := api.Schedule{Name: i.Name, Topic: i.Topic, Spec: i.Spec, TimeZone: i.TimeZone, Misfire: string(i.Misfire),
		Overlap: string(i.Overlap), Paused: i.Paused, Next: make([]time.Time, 0, len(i.Next)),
		LastFireID: i.LastFireID, Fires: i.Fires, Misfires: i.Misfires, Created: i.Created.UTC(), Updated: i.Updated.UTC()}
	if !i.LastFire.IsZero() {
		out.LastFire = i.LastFire.UTC()
	}
	if len(i.Payload) > 0 && json.Valid(i.Payload) {
		out.Payload = i.Payload
	} else if len(i.Payload) > 0 {
		out.Payload, _ = json.Marshal(string(i.Payload))
	}
	for _, t := range i.Next {
		out.Next = append(out.Next, t.UTC())
	}
	return out
}

func (s *Server) handleSchedules(w http.ResponseWriter, r *http.Request) error {
	sc, _, err := s.schedulerOf(r)
	if err != nil {
		return err
	}
	cursor, limit, err := pageQuery(r.URL.Query())
	if err != nil {
		return err
	}
	page, next, err := sc.Schedules(r.Context(), cursor, limit)
	if err != nil {
		return err
	}
	out := api.SchedulesResponse{Schedules: make([]api.Schedule, len(page)), Next: next}
	for i, info := range page {
		out.Schedules[i] = toAPISchedule(info)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleSchedule(w http.ResponseWriter, r *http.Request) error {
	sc, name, err := s.schedulerOf(r)
	if err != nil {
		return err
	}
	info, err := sc.Schedule(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPISchedule(info))
	return nil
}

func (s *Server) handleDeleteSchedule(w http.ResponseWriter, r *http.Request) error {
	sc, name, err := s.schedulerOf(r)
	if err != nil {
		return err
	}
	ok, err := sc.DeleteSchedule(r.Context(), name)
	if err != nil {
		return err
	}
	if !ok {
		return &requestError{status: http.StatusNotFound, msg: fmt.Sprintf("no schedule %q", name)}
	}
	s.metrics.admin("delete_schedule", 0)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) handlePauseSchedule(w http.ResponseWriter, r *http.Request) error {
	return s.scheduleAction(w, r, "pause_schedule", queue.Scheduler.PauseSchedule)
}

func (s *Server) handleResumeSchedule(w http.ResponseWriter, r *http.Request) error {
	return s.scheduleAction(w, r, "resume_schedule", queue.Scheduler.ResumeSchedule)
}

func (s *Server) scheduleAction(w http.ResponseWriter, r *http.Request, action string, act func(queue.Scheduler, context.Context, string) error) error {
	sc, name, err := s.schedulerOf(r)
	if err != nil {
		return err
	}
	if err := act(sc, r.Context(), name); err != nil {
		return err
	}
	s.metrics.admin(action, 0)
	info, err := sc.Schedule(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPISchedule(info))
	return nil
}

func (s *Server) handleTriggerSchedule(w http.ResponseWriter, r *http.Request) error {
	sc, name, err := s.schedulerOf(r)
	if err != nil {
		return err
	}
	id, err := sc.TriggerSchedule(r.Context(), name)
	if err != nil {
		return err
	}
	s.metrics.admin("trigger_schedule", 0)
	writeJSON(w, http.StatusOK, api.TriggerResponse{ID: id})
	return nil
}

// schedulerCollector exports a Scheduler's counts: tock_schedules, tock_schedules_paused,
// tock_schedule_fires_total and tock_schedule_misfires_total.
type schedulerCollector struct{ sc queue.Scheduler }

var (
	schedulesDesc = prometheus.NewDesc("tock_schedules", "Schedules kept by the engine.", nil, nil)
	pausedDesc    = prometheus.NewDesc("tock_schedules_paused", "Schedules paused.", nil, nil)
	firesDesc     = prometheus.NewDesc("tock_schedule_fires_total", "Messages put by schedules, by every process of the engine's storage.", nil, nil)
	misfiresDesc  = prometheus.NewDesc("tock_schedule_misfires_total", "Nominal fire times schedules passed over, by their misfire or overlap policy.", nil, nil)
)

func (schedulerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- schedulesDesc
	ch <- pausedDesc
	ch <- firesDesc
	ch <- misfiresDesc
}

func (c schedulerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	st, err := c.sc.ScheduleStats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(schedulesDesc, fmt.Errorf("schedule stats: %w", err))
		return
	}
	ch <- prometheus.MustNewConstMetric(schedulesDesc, prometheus.GaugeValue, float64(st.Schedules))
	ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, float64(st.Paused))
	ch <- prometheus.MustNewConstMetric(firesDesc, prometheus.CounterValue, float64(st.Fires))
	ch <- prometheus.MustNewConstMetric(misfiresDesc, prometheus.CounterValue, float64(st.Misfires))
}

// isFireID reports whether id is the ID of a schedule's fire, "<name>@<RFC 3339 time>", which
// the API takes wherever it takes a message ID.
func isFireID(id string) bool {
	name, _, ok := queue.ParseFireID(id)
	return ok && schedule.CheckName(name) == nil
}
