package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// A Schedule is a schedule of the server's engine with its state: its next fire times, its last
// fire, its counts (see queue.ScheduleInfo).
type Schedule = api.Schedule

// A ScheduleRequest is what [Client.SetSchedule] sets: topic, spec, time zone, payload (a JSON
// value), misfire and overlap policies (see queue.Schedule).
type ScheduleRequest = api.ScheduleRequest

// A statusTaker is an answer that wants its status code.
type statusTaker interface{ takeStatus(int) }

// setAnswer is the answer of a schedule's set: the schedule, and whether the answer was 201.
type setAnswer struct {
	api.Schedule
	created bool
}

func (a *setAnswer) takeStatus(code int) { a.created = code == http.StatusCreated }

// SetSchedule creates or replaces the schedule name (PUT /v1/schedules/{name}) and returns it
// with its state, and whether it created it. A bad field is refused with an [*Error] matching
// queue.ErrInvalid whose message names it. It is retried (see [WithRetries]): a set repeated
// after a lost answer sets the same schedule again, and then reports a replace. A server whose
// engine keeps no schedules answers 501, as for every call of this file.
func (c *Client) SetSchedule(ctx context.Context, name string, s ScheduleRequest) (Schedule, bool, error) {
	var res setAnswer
	err := c.do(ctx, http.MethodPut, api.SchedulePath(name), s, &res, true)
	return res.Schedule, res.created, err
}

// Schedule returns the schedule name, with its next five fire times and its last fire. It fails
// with an [*Error] matching queue.ErrNotFound when there is none. It is retried.
func (c *Client) Schedule(ctx context.Context, name string) (Schedule, error) {
	var res api.Schedule
	err := c.do(ctx, http.MethodGet, api.SchedulePath(name), nil, &res, true)
	return res, err
}

// Schedules returns a page of schedules in the order of their names, from the first name after
// cursor ("" for the first page), and the cursor of the next page ("" on the last). limit is
// from 1 to [api.MaxPage], or 0 for the server's default. It is retried.
func (c *Client) Schedules(ctx context.Context, cursor string, limit int) ([]Schedule, string, error) {
	if limit < 0 || limit > api.MaxPage {
		return nil, "", fmt.Errorf("client: Schedules: limit %d is not from 0 to %d: %w", limit, api.MaxPage, queue.ErrInvalid)
	}
	q := url.Values{}
	if cursor != "" {
		q.Set(api.QueryCursor, cursor)
	}
	if limit != 0 {
		q.Set(api.QueryLimit, strconv.Itoa(limit))
	}
	path := api.PathSchedules
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var res api.SchedulesResponse
	err := c.do(ctx, http.MethodGet, path, nil, &res, true)
	return res.Schedules, res.Next, err
}

// DeleteSchedule removes the schedule name and its fire not yet due, and reports whether there
// was one. It is retried, so false may mean that an earlier attempt deleted it.
func (c *Client) DeleteSchedule(ctx context.Context, name string) (bool, error) {
	err := c.do(ctx, http.MethodDelete, api.SchedulePath(name), nil, nil, true)
	var e *Error
	if errors.As(err, &e) && e.StatusCode == http.StatusNotFound && e.Code == api.CodeNotFound {
		return false, nil
	}
	return err == nil, err
}

// PauseSchedule pauses the schedule name and returns it. It is retried.
func (c *Client) PauseSchedule(ctx context.Context, name string) (Schedule, error) {
	var res api.Schedule
	err := c.do(ctx, http.MethodPost, api.ScheduleActionPath(name, "pause"), nil, &res, true)
	return res, err
}

// ResumeSchedule resumes the schedule name and returns it. It is retried.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (Schedule, error) {
	var res api.Schedule
	err := c.do(ctx, http.MethodPost, api.ScheduleActionPath(name, "resume"), nil, &res, true)
	return res, err
}

// TriggerSchedule fires the schedule name once now and returns the fire's ID. It is not retried:
// a repeat would fire again.
func (c *Client) TriggerSchedule(ctx context.Context, name string) (string, error) {
	var res api.TriggerResponse
	err := c.do(ctx, http.MethodPost, api.ScheduleActionPath(name, "trigger"), nil, &res, false)
	return res.ID, err
}
