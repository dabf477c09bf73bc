package server_test

import (
	"context"
	"fmt"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/queue"
)

// httpAdmin is a client.Engine in front of an engine that is a queue.Admin, with the admin calls
// of the Go client, so that queuetest's admin cases run over HTTP too. Where the HTTP API and the
// contract differ, it says so:
//
//   - Payloads travel as JSON values (see client.Engine), and the API's previews are of the
//     payload as stored: a page's payloads are decoded with client.DecodePayload, and one the
//     server cut (Truncated) is fetched whole with Message and cut to queue.PreviewLen.
//   - Messages refuses a limit below one without a request: the client's zero means the server's
//     default.
//   - Requeue with no IDs is the client's RequeueAll.
type httpAdmin struct {
	queue.Engine // a *client.Engine, its other methods hidden
	c            *client.Client
}

var _ queue.Admin = httpAdmin{}

func (e httpAdmin) Topics(ctx context.Context) ([]queue.TopicInfo, error) {
	ts, err := e.c.Topics(ctx)
	out := make([]queue.TopicInfo, len(ts))
	for i, t := range ts {
		out[i] = queue.TopicInfo{Topic: t.Topic, Scheduled: t.Scheduled, Due: t.Due, Leased: t.Leased, Dead: t.Dead,
			OldestDue: t.OldestDue, Paused: t.Paused, Puts: t.Puts, Deliveries: t.Deliveries, Acks: t.Acks}
	}
	return out, err
}

// fromWire returns m as the contract has it, its payload decoded as a client.Engine decodes it.
func fromWire(m client.MessageInfo, payload []byte) (queue.MessageInfo, error) {
	out := queue.MessageInfo{ID: m.ID, Topic: m.Topic, State: queue.State(m.State), DeliverAt: m.DeliverAt, Headers: m.Headers,
		Attempts: m.Attempts, LastFailure: m.LastFailure, FailedAt: m.FailedAt, Reason: m.Reason, LeaseDeadline: m.LeaseDeadline}
	p, err := client.DecodePayload(payload)
	if err != nil {
		return out, fmt.Errorf("payload %q of message %q: %v", payload, m.ID, err)
	}
	out.Payload, out.Size = p, len(p)
	return out, nil
}

func (e httpAdmin) Messages(ctx context.Context, topic string, state queue.State, cursor string, limit int) ([]queue.MessageInfo, string, error) {
	if limit < 1 {
		return nil, "", fmt.Errorf("page of %d messages: %w", limit, queue.ErrInvalid)
	}
	page, next, err := e.c.Messages(ctx, topic, state, cursor, limit)
	if err != nil {
		return nil, "", err
	}
	out := make([]queue.MessageInfo, len(page))
	for i, m := range page {
		payload := []byte(m.Preview)
		if m.Truncated {
			whole, err := e.c.Message(ctx, m.ID)
			if err != nil {
				return nil, "", err
			}
			payload = whole.Payload
		}
		if out[i], err = fromWire(m, payload); err != nil {
			return nil, "", err
		}
		out[i].Payload = out[i].Payload[:min(len(out[i].Payload), queue.PreviewLen)]
	}
	return out, next, nil
}

func (e httpAdmin) Message(ctx context.Context, id string) (queue.MessageInfo, error) {
	m, err := e.c.Message(ctx, id)
	if err != nil {
		return queue.MessageInfo{}, err
	}
	return fromWire(m, m.Payload)
}

func (e httpAdmin) DeliverNow(ctx context.Context, id string) (bool, error) {
	ok, err := e.c.DeliverNow(ctx, id)
	return ok, err
}

func (e httpAdmin) Requeue(ctx context.Context, topic string, ids ...string) (int, error) {
	var n int
	var err error
	if len(ids) == 0 {
		n, err = e.c.RequeueAll(ctx, topic)
	} else {
		n, err = e.c.Requeue(ctx, topic, ids...)
	}
	return n, err
}

func (e httpAdmin) Purge(ctx context.Context, topic string, state queue.State) (int, error) {
	n, err := e.c.Purge(ctx, topic, state)
	return n, err
}

func (e httpAdmin) Pause(ctx context.Context, topic string) error {
	return e.pause(ctx, topic, true)
}

func (e httpAdmin) Resume(ctx context.Context, topic string) error {
	return e.pause(ctx, topic, false)
}

func (e httpAdmin) pause(ctx context.Context, topic string, pause bool) error {
	if pause {
		return e.c.Pause(ctx, topic)
	}
	return e.c.Resume(ctx, topic)
}
