package server_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/queue"
)

// httpScheduler is the part of queue.Scheduler beyond queue.Engine, over the HTTP API of a server
// whose engine keeps schedules: each call is the request of the API that does the same. Payloads
// travel as client.Engine's do; an empty name is refused without a request (its path names no
// schedule). serveOverHTTP puts it beside the engine's other parts.
type httpScheduler struct{ c *client.Client }

func checkedName(name string) error {
	if name == "" {
		return fmt.Errorf("name: empty: %w", queue.ErrInvalid)
	}
	return nil
}

func (e httpScheduler) SetSchedule(ctx context.Context, s queue.Schedule) (bool, error) {
	if err := checkedName(s.Name); err != nil {
		return false, err
	}
	req := client.ScheduleRequest{Topic: s.Topic, Spec: s.Spec, TimeZone: s.TimeZone, Misfire: string(s.Misfire), Overlap: string(s.Overlap)}
	p, err := client.EncodePayload(s.Payload)
	if err != nil {
		return false, err
	}
	if len(s.Payload) > 0 {
		req.Payload = p
	}
	_, created, err := e.c.SetSchedule(ctx, s.Name, req)
	return created, err
}

func fromWireSchedule(s client.Schedule) (queue.ScheduleInfo, error) {
	info := queue.ScheduleInfo{
		Schedule: queue.Schedule{Name: s.Name, Topic: s.Topic, Spec: s.Spec, TimeZone: s.TimeZone,
			Misfire: queue.Misfire(s.Misfire), Overlap: queue.Overlap(s.Overlap)},
		Paused: s.Paused, LastFire: s.LastFire, LastFireID: s.LastFireID, Fires: s.Fires, Misfires: s.Misfires,
		Created: s.Created, Updated: s.Updated,
	}
	if len(s.Next) > 0 {
		info.Next = make([]time.Time, len(s.Next))
		copy(info.Next, s.Next)
	}
	if len(s.Payload) > 0 {
		p, err := client.DecodePayload(s.Payload)
		if err != nil {
			return info, fmt.Errorf("schedule %q: %w", s.Name, err)
		}
		info.Payload = p
	}
	return info, nil
}

func (e httpScheduler) Schedule(ctx context.Context, name string) (queue.ScheduleInfo, error) {
	if err := checkedName(name); err != nil {
		return queue.ScheduleInfo{}, err
	}
	s, err := e.c.Schedule(ctx, name)
	if err != nil {
		return queue.ScheduleInfo{}, err
	}
	return fromWireSchedule(s)
}

func (e httpScheduler) Schedules(ctx context.Context, cursor string, limit int) ([]queue.ScheduleInfo, string, error) {
	if limit < 1 || limit > queue.MaxPage {
		// The client's 0 is the server's default page; the contract refuses it.
		return nil, "", fmt.Errorf("limit %d: %w", limit, queue.ErrInvalid)
	}
	page, next, err := e.c.Schedules(ctx, cursor, limit)
	if err != nil {
		return nil, "", err
	}
	out := make([]queue.ScheduleInfo, len(page))
	for i, s := range page {
		if out[i], err = fromWireSchedule(s); err != nil {
			return nil, "", err
		}
	}
	return out, next, nil
}

func (e httpScheduler) DeleteSchedule(ctx context.Context, name string) (bool, error) {
	if err := checkedName(name); err != nil {
		return false, err
	}
	ok, err := e.c.DeleteSchedule(ctx, name)
	return ok, err
}

func (e httpScheduler) PauseSchedule(ctx context.Context, name string) error {
	_, err := e.c.PauseSchedule(ctx, name)
	return err
}

func (e httpScheduler) ResumeSchedule(ctx context.Context, name string) error {
	_, err := e.c.ResumeSchedule(ctx, name)
	return err
}

func (e httpScheduler) TriggerSchedule(ctx context.Context, name string) (string, error) {
	id, err := e.c.TriggerSchedule(ctx, name)
	return id, err
}

// ScheduleStats adds up the counts of the listed schedules (one page suffices in the suite): the
// API has no route for the engine's, which /metrics exports.
func (e httpScheduler) ScheduleStats(ctx context.Context) (queue.ScheduleStats, error) {
	var st queue.ScheduleStats
	page, _, err := e.Schedules(ctx, "", queue.MaxPage)
	if err != nil {
		return st, err
	}
	for _, s := range page {
		st.Schedules++
		if s.Paused {
			st.Paused++
		}
		st.Fires += s.Fires
		st.Misfires += s.Misfires
	}
	return st, nil
}
