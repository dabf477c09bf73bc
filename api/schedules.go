package api

import (
	"encoding/json"
	"net/url"
	"time"
)

// The routes of schedules (queue.Scheduler): they need an engine that keeps schedules, and are
// answered 501 ([CodeNotImplemented]) otherwise.
const (
	// RouteSetSchedule creates or replaces a schedule: 201 with the schedule when it created it,
	// 200 when it replaced it. Its body is a [ScheduleRequest].
	RouteSetSchedule = "PUT /v1/schedules/{name}"
	// RouteSchedules lists schedules a page at a time, in the order of their names
	// ([QueryCursor], [QueryLimit]): a [SchedulesResponse].
	RouteSchedules = "GET " + PathSchedules
	// RouteSchedule answers a [Schedule], with its next fire times and its last fire.
	RouteSchedule = "GET /v1/schedules/{name}"
	// RouteDeleteSchedule deletes a schedule and its fire not yet due: 204, or 404 when there is
	// none.
	RouteDeleteSchedule = "DELETE /v1/schedules/{name}"
	// RoutePauseSchedule and RouteResumeSchedule pause and resume a schedule: the [Schedule]
	// after.
	RoutePauseSchedule  = "POST /v1/schedules/{name}/pause"
	RouteResumeSchedule = "POST /v1/schedules/{name}/resume"
	// RouteTriggerSchedule fires a schedule once now: a [TriggerResponse].
	RouteTriggerSchedule = "POST /v1/schedules/{name}/trigger"
)

// PathSchedules is the path of [RouteSchedules].
const PathSchedules = "/v1/schedules"

// SchedulePath returns the path of [RouteSchedule] (and of RouteSetSchedule and
// RouteDeleteSchedule) for the schedule name, escaped.
func SchedulePath(name string) string { return PathSchedules + "/" + url.PathEscape(name) }

// ScheduleActionPath returns the path of the pause, resume or trigger route of the schedule name.
func ScheduleActionPath(name, action string) string { return SchedulePath(name) + "/" + action }

// ScheduleRequest is the body of [RouteSetSchedule]; the name is in the path. Fields it does not
// know are refused, and so is a bad value, with a 400 naming the field.
type ScheduleRequest struct {
	// Topic is the topic every fire is put on.
	Topic string `json:"topic"`
	// Spec says when it fires: a cron expression of 5 fields (or 6, seconds first), a descriptor
	// (@hourly, @daily, ...) or "@every <Go duration>", from 10ms (see queue.Schedule.Spec).
	Spec string `json:"spec"`
	// TimeZone is an IANA zone name, such as "Europe/Paris"; absent is UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// Payload is any JSON value, every fire's payload.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Misfire is "once" (the default), "skip" or "all"; Overlap "allow" (the default) or "skip".
	Misfire string `json:"misfire,omitempty"`
	Overlap string `json:"overlap,omitempty"`
}

// Schedule is a schedule and its state, as [RouteSchedule] answers it.
type Schedule struct {
	Name     string          `json:"name"`
	Topic    string          `json:"topic"`
	Spec     string          `json:"spec"`
	TimeZone string          `json:"time_zone"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	Misfire  string          `json:"misfire"`
	Overlap  string          `json:"overlap"`
	Paused   bool            `json:"paused"`
	// Next holds the next five nominal fire times, earliest first; empty while paused.
	Next []time.Time `json:"next"`
	// LastFire and LastFireID are the nominal time and ID of the latest fire whose time has come;
	// absent when none has.
	LastFire   time.Time `json:"last_fire,omitzero"`
	LastFireID string    `json:"last_fire_id,omitempty"`
	// Fires and Misfires count the schedule's fires and the nominal times it passed over.
	Fires    uint64    `json:"fires"`
	Misfires uint64    `json:"misfires"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
}

// SchedulesResponse is the answer of [RouteSchedules]: a page of schedules in the order of their
// names, and the cursor of the next page, absent on the last. Schedules is empty, not null, when
// there is none.
type SchedulesResponse struct {
	Schedules []Schedule `json:"schedules"`
	Next      string     `json:"next,omitempty"`
}

// TriggerResponse is the answer of [RouteTriggerSchedule]: the ID of the fire put.
type TriggerResponse struct {
	ID string `json:"id"`
}
