package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// A Topic is what [Client.Topics] reports of one topic: its counts by state, the due time of its
// oldest due message, whether it is paused, and its throughput.
type Topic = api.Topic

// A MessageInfo describes a waiting message without consuming it: an item of a page of
// [Client.Messages], or, with its whole Payload, the answer of [Client.Message].
type MessageInfo = api.MessageInfo

// Topics lists every topic of the server's queue that holds a message in any state, or is paused,
// in the order of their names. It is retried (see [WithRetries]). A server whose engine cannot be
// operated answers 501: an [*Error] with Code [api.CodeNotImplemented], as for every call of
// this file.
func (c *Client) Topics(ctx context.Context) ([]Topic, error) {
	var res api.TopicsResponse
	err := c.do(ctx, http.MethodGet, api.PathTopics, nil, &res, true)
	return res.Topics, err
}

// Messages returns one page of the messages of topic in state, read without consuming them, and
// the cursor of the next page ("" on the last); cursor is "" for the first page. limit is from 1
// to [api.MaxPage], or 0 for the server's default ([api.DefaultPage]). Payloads are previewed:
// see [MessageInfo]. It is retried (see [WithRetries]); a cursor stays valid however the topic
// changes. [Client.AllMessages] walks every page.
func (c *Client) Messages(ctx context.Context, topic string, state queue.State, cursor string, limit int) (page []MessageInfo, next string, err error) {
	if limit < 0 || limit > api.MaxPage {
		return nil, "", fmt.Errorf("client: Messages: limit %d is not from 0 to %d: %w", limit, api.MaxPage, queue.ErrInvalid)
	}
	q := url.Values{api.QueryState: {string(state)}}
	if cursor != "" {
		q.Set(api.QueryCursor, cursor)
	}
	if limit != 0 {
		q.Set(api.QueryLimit, strconv.Itoa(limit))
	}
	var res api.MessagesResponse
	err = c.do(ctx, http.MethodGet, api.MessagesPath(topic)+"?"+q.Encode(), nil, &res, true)
	return res.Messages, res.Next, err
}

// AllMessages returns an iterator over the messages of topic in state, fetched a page of limit
// at a time as the loop asks for them (limit as for [Client.Messages]). An error ends the
// iteration with a zero MessageInfo and the error; breaking out of the loop fetches no more.
func (c *Client) AllMessages(ctx context.Context, topic string, state queue.State, limit int) iter.Seq2[MessageInfo, error] {
	return func(yield func(MessageInfo, error) bool) {
		cursor := ""
		for {
			page, next, err := c.Messages(ctx, topic, state, cursor, limit)
			if err != nil {
				yield(MessageInfo{}, err)
				return
			}
			for _, m := range page {
				if !yield(m, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			cursor = next
		}
	}
}

// Message returns the waiting message id with its whole payload, as the JSON value it was put
// as. When no such message is waiting it fails with an [*Error] that matches [queue.ErrNotFound].
// It is retried (see [WithRetries]).
func (c *Client) Message(ctx context.Context, id string) (MessageInfo, error) {
	if id == "" {
		return MessageInfo{}, fmt.Errorf("client: Message: empty message id: %w", queue.ErrInvalid)
	}
	var m MessageInfo
	err := c.do(ctx, http.MethodGet, api.MessagePath(id), nil, &m, true)
	return m, err
}

// DeliverNow makes the scheduled message id due at once. It reports false, with a nil error, when
// the server answers that no such message is scheduled (it is due already, leased, a dead letter,
// or not waiting). It is retried as [Client.Cancel] is, so false means "not scheduled now": an
// attempt whose answer was lost may have made it due.
func (c *Client) DeliverNow(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, fmt.Errorf("client: DeliverNow: empty message id: %w", queue.ErrInvalid)
	}
	var res api.MovedResponse
	err := c.do(ctx, http.MethodPost, api.DeliverPath(id), nil, &res, true)
	var e *Error
	if errors.As(err, &e) && e.StatusCode == http.StatusNotFound && e.Code == api.CodeNotFound {
		return false, nil
	}
	return err == nil && res.Moved > 0, err
}

// Requeue moves the dead letters of topic named by ids back onto topic, due at once, with their
// attempts counted from zero, and returns how many it moved; an ID that names no dead letter of
// topic is skipped. At least one ID is required (queue.ErrInvalid otherwise, without a request),
// so that an empty list never requeues everything: that is [Client.RequeueAll]. At most
// [api.MaxPage] IDs go in one call. It is not retried: a retry would count nothing moved.
func (c *Client) Requeue(ctx context.Context, topic string, ids ...string) (int, error) {
	if len(ids) == 0 {
		return 0, fmt.Errorf("client: Requeue of no IDs (RequeueAll requeues every dead letter): %w", queue.ErrInvalid)
	}
	return c.requeue(ctx, topic, api.RequeueRequest{IDs: ids})
}

// RequeueAll moves every dead letter of topic back onto topic, as [Client.Requeue] does, and
// returns how many it moved.
func (c *Client) RequeueAll(ctx context.Context, topic string) (int, error) {
	return c.requeue(ctx, topic, api.RequeueRequest{All: true})
}

func (c *Client) requeue(ctx context.Context, topic string, req api.RequeueRequest) (int, error) {
	var res api.MovedResponse
	err := c.do(ctx, http.MethodPost, api.RequeuePath(topic), req, &res, false)
	return res.Moved, err
}

// Purge removes every message of topic in state, [queue.Scheduled], [queue.Due] or [queue.Dead],
// and returns how many it removed; the server refuses any other state (an [*Error] matching
// [queue.ErrInvalid]). It is not retried.
func (c *Client) Purge(ctx context.Context, topic string, state queue.State) (int, error) {
	var res api.PurgeResponse
	err := c.do(ctx, http.MethodPost, api.PurgePath(topic), api.PurgeRequest{State: string(state)}, &res, false)
	return res.Removed, err
}

// Pause stops deliveries of topic until [Client.Resume]: receives on it wait as on an empty
// topic, while puts go on. The pause survives restarts of the server. Pausing a paused topic does
// nothing, so Pause is retried (see [WithRetries]).
func (c *Client) Pause(ctx context.Context, topic string) error {
	return c.do(ctx, http.MethodPost, api.PausePath(topic), nil, nil, true)
}

// Resume ends a pause of topic; waiting receives are served at once. Resuming a topic that is not
// paused does nothing, so Resume is retried (see [WithRetries]).
func (c *Client) Resume(ctx context.Context, topic string) error {
	return c.do(ctx, http.MethodPost, api.ResumePath(topic), nil, nil, true)
}
