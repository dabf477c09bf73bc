package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// A Client talks to one tockd server. It is safe for concurrent use.
type Client struct {
	base    string // scheme://host[/prefix], no trailing slash
	token   string
	http    *http.Client
	retries int
	backoff time.Duration
}

// An Option configures a Client.
type Option func(*Client)

// WithToken sends token as a bearer token with every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient makes the Client send its requests with hc instead of
// http.DefaultClient. hc should have no overall Timeout shorter than the
// longest Receive wait; use contexts to bound calls instead.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithRetries sets how many times an idempotent call is retried after a
// network error or a 502, 503 or 504 (default 3; 0 disables retries), and
// the first backoff, doubled after each attempt with jitter (default 100ms).
func WithRetries(n int, backoff time.Duration) Option {
	return func(c *Client) {
		c.retries = max(n, 0)
		if backoff > 0 {
			c.backoff = backoff
		}
	}
}

// New returns a Client of the server at baseURL, such as
// "http://127.0.0.1:7070". It fails only when baseURL is not an absolute
// http or https URL.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: server URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: server URL %q must look like http://host:port", baseURL)
	}
	u.RawQuery, u.Fragment = "", ""
	c := &Client{base: strings.TrimSuffix(u.String(), "/"), http: http.DefaultClient, retries: 3, backoff: 100 * time.Millisecond}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// A Message is a message to put. With neither Delay nor DeliverAt it is due
// at once. Setting both is an error.
type Message struct {
	// ID names the message; empty lets the server choose one.
	ID string
	// Payload is any JSON value; nil sends no payload (delivered as null).
	Payload json.RawMessage
	// Delay is how long from the server's now the message is due.
	Delay time.Duration
	// DeliverAt is when the message is due.
	DeliverAt time.Time
}

// A PutResult is the server's answer to a put.
type PutResult struct {
	ID        string    `json:"id"`
	DeliverAt time.Time `json:"deliver_at"`
}

// A Delivery is a due message leased to this consumer until it is acked,
// nacked, or its visibility timeout passes.
type Delivery struct {
	ID        string          `json:"id"`
	Payload   json.RawMessage `json:"payload"`
	DeliverAt time.Time       `json:"deliver_at"`
	// Receipt identifies this lease for Ack and Nack.
	Receipt string `json:"receipt"`
	// Attempt counts deliveries of the message, 1 the first time.
	Attempt int `json:"attempt"`
}

// ReceiveOptions tunes a Receive. Zero fields take the server's defaults
// (10 messages, no wait, 30s visibility).
type ReceiveOptions struct {
	// Max is the most messages to return.
	Max int
	// Wait is how long the server may hold the request open until a
	// message is due (a long poll); zero returns at once.
	Wait time.Duration
	// Visibility is how long the messages are leased; unacked, they are
	// due again after it.
	Visibility time.Duration
}

// messageBody is a Message as the API takes it. Its JSON is written by
// hand: encoding/json would rescan every payload, which costs more than the
// rest of a batch put together. The server checks payloads are JSON.
type messageBody struct {
	ID        string
	Payload   json.RawMessage
	Delay     string
	DeliverAt string
}

func (b *messageBody) appendJSON(buf []byte) []byte {
	buf = append(buf, '{')
	sep := false
	field := func(name string) {
		if sep {
			buf = append(buf, ',')
		}
		sep = true
		buf = append(buf, name...)
	}
	if b.ID != "" {
		field(`"id":`)
		buf = appendString(buf, b.ID)
	}
	if len(b.Payload) > 0 {
		field(`"payload":`)
		buf = append(buf, b.Payload...)
	}
	if b.Delay != "" {
		field(`"delay":`)
		buf = appendString(buf, b.Delay)
	}
	if b.DeliverAt != "" {
		field(`"deliver_at":`)
		buf = appendString(buf, b.DeliverAt)
	}
	return append(buf, '}')
}

// appendString appends s as a JSON string.
func appendString(buf []byte, s string) []byte {
	q, _ := json.Marshal(s) // cannot fail for a string
	return append(buf, q...)
}

// rawBody is a request body already encoded as JSON.
type rawBody []byte

func (m Message) body() (messageBody, error) {
	b := messageBody{ID: m.ID, Payload: m.Payload}
	switch {
	case m.Delay != 0 && !m.DeliverAt.IsZero():
		return b, fmt.Errorf("client: message %q sets both Delay and DeliverAt", m.ID)
	case m.Delay < 0:
		return b, fmt.Errorf("client: message %q has a negative delay %v", m.ID, m.Delay)
	case m.Delay > 0:
		b.Delay = m.Delay.String()
	case !m.DeliverAt.IsZero():
		b.DeliverAt = m.DeliverAt.Format(time.RFC3339Nano)
	}
	return b, nil
}

// Put schedules m on topic and returns its id and due time once the server
// has stored it durably. It is not retried (see the package doc).
func (c *Client) Put(ctx context.Context, topic string, m Message) (PutResult, error) {
	b, err := m.body()
	if err != nil {
		return PutResult{}, err
	}
	var res PutResult
	err = c.do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(topic)+"/messages", rawBody(b.appendJSON(nil)), &res, false)
	return res, err
}

// PutBatch schedules all of ms on topic, or none of them, and returns their
// ids in order.
func (c *Client) PutBatch(ctx context.Context, topic string, ms []Message) ([]string, error) {
	buf := make([]byte, 0, 64*len(ms)+16)
	buf = append(buf, `{"messages":[`...)
	for i, m := range ms {
		b, err := m.body()
		if err != nil {
			return nil, err
		}
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = b.appendJSON(buf)
	}
	buf = append(buf, "]}"...)
	var res struct {
		IDs []string `json:"ids"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(topic)+"/batch", rawBody(buf), &res, false)
	return res.IDs, err
}

// Cancel removes the pending message id. It reports false, with a nil
// error, when no such message is pending (never put, already delivered or
// cancelled). Cancel is retried after a network error, so when an attempt
// cancelled the message but its answer was lost, the retry finds nothing
// pending and Cancel reports false: false means "not pending now", not "was
// never cancelled".
func (c *Client) Cancel(ctx context.Context, id string) (bool, error) {
	err := c.do(ctx, http.MethodDelete, "/v1/messages/"+url.PathEscape(id), nil, nil, true)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Receive leases up to opts.Max due messages of topic, waiting up to
// opts.Wait for the first. An empty result with a nil error means none
// came due in time.
func (c *Client) Receive(ctx context.Context, topic string, opts ReceiveOptions) ([]Delivery, error) {
	req := struct {
		Max        int    `json:"max,omitempty"`
		Wait       string `json:"wait,omitempty"`
		Visibility string `json:"visibility,omitempty"`
	}{Max: opts.Max}
	if opts.Wait > 0 {
		req.Wait = opts.Wait.String()
	}
	if opts.Visibility > 0 {
		req.Visibility = opts.Visibility.String()
	}
	var res struct {
		Messages []Delivery `json:"messages"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(topic)+"/receive", req, &res, false)
	return res.Messages, err
}

// Ack ends the leases of receipts: their messages are never delivered
// again. It fails with ErrBadRequest when a receipt is unknown or expired.
func (c *Client) Ack(ctx context.Context, receipts ...string) error {
	req := struct {
		Receipts []string `json:"receipts"`
	}{Receipts: receipts}
	return c.do(ctx, http.MethodPost, "/v1/ack", req, nil, false)
}

// Nack ends the lease of receipt and makes its message due again after
// delay (zero: at once).
func (c *Client) Nack(ctx context.Context, receipt string, delay time.Duration) error {
	req := struct {
		Receipt string `json:"receipt"`
		Delay   string `json:"delay,omitempty"`
	}{Receipt: receipt}
	if delay > 0 {
		req.Delay = delay.String()
	}
	return c.do(ctx, http.MethodPost, "/v1/nack", req, nil, false)
}

// Healthy returns nil when the server process answers /healthz.
func (c *Client) Healthy(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/healthz", nil, nil, true)
}

// Ready returns nil when the server answers /readyz with 200: its store is
// open and it is not shutting down.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, nil, true)
}

// do sends one request to path (escaped, with any query), retrying it when idempotent, and decodes a 2xx
// JSON answer into out when out is not nil.
func (c *Client) do(ctx context.Context, method, path string, in, out any, idempotent bool) error {
	var body []byte
	switch in := in.(type) {
	case nil:
	case rawBody:
		body = in
	default:
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("client: encoding request: %w", err)
		}
	}
	attempts := 1
	if idempotent {
		attempts += c.retries
	}
	wait := c.backoff
	var err error
	for i := range attempts {
		if i > 0 {
			// Full jitter keeps retrying clients from arriving in step.
			d := time.Duration(rand.Int64N(int64(wait))) + wait/2
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("client: %s %s: %w (last error: %v)", method, path, ctx.Err(), err)
			case <-t.C:
			}
			wait *= 2
		}
		var retry bool
		retry, err = c.once(ctx, method, path, body, out)
		if err == nil || !retry || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// once sends one request and reports whether a failure may be retried.
func (c *Client) once(ctx context.Context, method, path string, body []byte, out any) (retry bool, err error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return false, fmt.Errorf("client: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// A transport error: the request may not have reached the server.
		return true, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		e := &Error{StatusCode: resp.StatusCode}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var eb struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &eb) == nil && eb.Error != "" {
			e.Message = eb.Error
		} else if s := strings.TrimSpace(string(data)); s != "" {
			e.Message = s
		} else {
			e.Message = http.StatusText(resp.StatusCode)
		}
		return e.Temporary(), e
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return false, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return false, fmt.Errorf("client: %s %s: decoding response: %w", method, path, err)
	}
	return false, nil
}

// Stats is the server's report from GET /v1/stats: the store's counts, the
// server's totals since it started and delivery lateness, in seconds, over
// the last minute.
type Stats struct {
	Time          time.Time `json:"time"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Pending       int64     `json:"pending"`
	Due           int64     `json:"due"`
	Leased        int64     `json:"leased"`
	Puts          uint64    `json:"puts"`
	Deliveries    uint64    `json:"deliveries"`
	Acks          uint64    `json:"acks"`
	Nacks         uint64    `json:"nacks"`
	Cancels       uint64    `json:"cancels"`
	Lateness      struct {
		Count uint64  `json:"count"`
		P50   float64 `json:"p50"`
		P90   float64 `json:"p90"`
		P99   float64 `json:"p99"`
		Max   float64 `json:"max"`
	} `json:"lateness"`
}

// Stats returns the server's counts.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := c.do(ctx, http.MethodGet, "/v1/stats?history=0&forecast=0", nil, &st, true)
	return st, err
}
