package client

import (
	"context"
	"fmt"
	"net/http"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// A Limit is a topic's delivery limit, as [Client.Limits] and [Client.SetLimit] give it.
type Limit = api.Limit

// Limits lists the delivery limits of the server's queue, by topic. A server whose engine has no
// limits answers 501: an [*Error] with Code [api.CodeNotImplemented], as for every call of this
// file. It is retried (see [WithRetries]).
func (c *Client) Limits(ctx context.Context) ([]Limit, error) {
	var res api.LimitsResponse
	err := c.do(ctx, http.MethodGet, api.PathLimits, nil, &res, true)
	return res.Limits, err
}

// SetLimit sets the delivery limit of topic, for every consumer of the server's queue, and returns
// it as kept (its default burst filled in); the zero limit removes it. A limit
// [queue.Limit.Check] refuses is refused without a request. Setting the same limit again does
// nothing more, so SetLimit is retried (see [WithRetries]).
func (c *Client) SetLimit(ctx context.Context, topic string, l queue.Limit) (Limit, error) {
	if _, err := l.Check(); err != nil {
		return Limit{}, fmt.Errorf("client: SetLimit: %w", err)
	}
	if l.IsZero() {
		return Limit{Topic: topic}, c.RemoveLimit(ctx, topic)
	}
	var res Limit
	err := c.do(ctx, http.MethodPut, api.LimitPath(topic), api.Limit{Rate: l.Rate, Burst: l.Burst, Concurrency: l.Concurrency}, &res, true)
	return res, err
}

// RemoveLimit removes the delivery limit of topic; removing none does nothing. It is retried.
func (c *Client) RemoveLimit(ctx context.Context, topic string) error {
	return c.do(ctx, http.MethodDelete, api.LimitPath(topic), nil, nil, true)
}

var _ queue.Limiter = (*Engine)(nil)

// SetLimit is [Client.SetLimit]; see [queue.Limiter.SetLimit].
func (e *Engine) SetLimit(ctx context.Context, topic string, l queue.Limit) error {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	_, err = e.c.SetLimit(ctx, topic, l)
	return e.result(err)
}

// Limits is [Client.Limits]; see [queue.Limiter.Limits].
func (e *Engine) Limits(ctx context.Context) ([]queue.TopicLimit, error) {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	ls, err := e.c.Limits(ctx)
	if err != nil {
		return nil, e.result(err)
	}
	out := make([]queue.TopicLimit, len(ls))
	for i, l := range ls {
		out[i] = queue.TopicLimit{Topic: l.Topic, Limit: queue.Limit{Rate: l.Rate, Burst: l.Burst, Concurrency: l.Concurrency}}
	}
	return out, nil
}
