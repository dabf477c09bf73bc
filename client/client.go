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
	"strconv"
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

// An Option configures a Client. A nil Option is ignored.
type Option func(*config)

// config is what the options set; New checks it.
type config struct {
	token   string
	http    *http.Client
	retries int
	backoff time.Duration
}

// WithToken sends token as a bearer token with every request. An empty
// token, the default, sends none.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithHTTPClient makes the Client send its requests with hc. hc should have
// no overall Timeout shorter than the longest Receive wait; use contexts to
// bound calls instead. A nil hc means [http.DefaultClient], the default.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.http = hc } }

// WithRetries sets how many times an idempotent call ([Client.Cancel],
// [Client.Stats], [Client.Healthy], [Client.Ready]) is retried, and the
// wait before the first retry. A call is retried after an error that
// leaves it unanswered (the connection was refused, reset or timed out)
// and after the answers 429, 502, 503 and 504 ([Error.Temporary]); never
// after any other answer. The wait doubles after each retry, and each
// wait is drawn at random from half to one and a half times it, so that
// clients that failed together do not retry together. An answer with a
// Retry-After header (in seconds or as a date) is waited out for at least
// that long, up to [MaxRetryAfter]; when the call's context would end
// first, the call returns the error at once instead of waiting.
//
// The default is 3 retries from 100ms. n = 0 disables retries; a zero
// backoff means the default. [New] refuses a negative n or backoff.
func WithRetries(n int, backoff time.Duration) Option {
	return func(c *config) { c.retries, c.backoff = n, backoff }
}

// MaxRetryAfter bounds how long a retry waits for a Retry-After header.
const MaxRetryAfter = time.Minute

// New returns a Client of the server at baseURL, such as
// "http://127.0.0.1:7070". It fails when baseURL is not an absolute http or
// https URL, and when an option is invalid, with an error naming it.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: server URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: server URL %q must look like http://host:port", baseURL)
	}
	u.RawQuery, u.Fragment = "", ""
	cfg := config{retries: 3}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.retries < 0 || cfg.backoff < 0 {
		return nil, fmt.Errorf("%w: WithRetries(%d, %v): neither may be negative", ErrInvalidOption, cfg.retries, cfg.backoff)
	}
	c := &Client{
		base:    strings.TrimSuffix(u.String(), "/"),
		token:   cfg.token,
		http:    cfg.http,
		retries: cfg.retries,
		backoff: cfg.backoff,
	}
	if c.http == nil {
		c.http = http.DefaultClient
	}
	if c.backoff == 0 {
		c.backoff = 100 * time.Millisecond
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

// A PutResult is the server's answer to a put. DeliverAt is when the
// message is due: the later of the time asked for and the server's now.
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
// error, when the server answers that no such message is pending (never
// put, already delivered or cancelled). Any other 404, such as the one for
// a path no route has when the Client's base URL is wrong, is an [*Error].
// Cancel is retried (see [WithRetries]), so when an attempt cancelled the
// message but its answer was lost, the retry finds nothing pending and
// Cancel reports false: false means "not pending now", not "was never
// cancelled".
func (c *Client) Cancel(ctx context.Context, id string) (bool, error) {
	err := c.do(ctx, http.MethodDelete, "/v1/messages/"+url.PathEscape(id), nil, nil, true)
	var e *Error
	if errors.As(err, &e) && e.StatusCode == http.StatusNotFound && e.Code == CodeNotFound {
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
// again. It fails with [ErrBadRequest] when a receipt is unknown or
// expired; the server acks the other receipts, and its message counts and
// shows the first of those that failed.
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
	backoff := c.backoff
	var err error
	for i := range attempts {
		var retry bool
		var after time.Duration
		retry, after, err = c.once(ctx, method, path, body, out)
		if err == nil || !retry || ctx.Err() != nil || i == attempts-1 {
			return err
		}
		// A draw from [backoff/2, 3·backoff/2): spread out, so that clients
		// that failed together do not retry together, and on average the
		// documented backoff.
		wait := max(time.Duration(rand.Int64N(int64(backoff)))+backoff/2, min(after, MaxRetryAfter))
		backoff *= 2
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return err // the context would end first: waiting is of no use
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("client: %s %s: %w (last error: %v)", method, path, ctx.Err(), err)
		case <-t.C:
		}
	}
	return err
}

// once sends one request and reports whether a failure may be retried, and
// after how long at least when the server said so (Retry-After).
func (c *Client) once(ctx context.Context, method, path string, body []byte, out any) (retry bool, after time.Duration, err error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return false, 0, fmt.Errorf("client: %w", err)
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
		return true, 0, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		e := &Error{StatusCode: resp.StatusCode}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var eb struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if json.Unmarshal(data, &eb) == nil && eb.Error != "" {
			e.Message, e.Code = eb.Error, eb.Code
		} else if s := strings.TrimSpace(string(data)); s != "" {
			e.Message = s
		} else {
			e.Message = http.StatusText(resp.StatusCode)
		}
		return e.Temporary(), retryAfter(resp.Header.Get("Retry-After"), time.Now()), e
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return false, 0, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return false, 0, fmt.Errorf("client: %s %s: decoding response: %w", method, path, err)
	}
	return false, 0, nil
}

// retryAfter parses a Retry-After header, delay-seconds or an HTTP date,
// as a wait from now; zero when it is absent or malformed.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(MaxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Stats is the server's report from GET /v1/stats: the store's counts, the
// server's totals since it started and lateness, in seconds.
type Stats struct {
	Time          time.Time `json:"time"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Scheduled     int64     `json:"scheduled"`
	Due           int64     `json:"due"`
	Leased        int64     `json:"leased"`
	Puts          uint64    `json:"puts"`
	Deliveries    uint64    `json:"deliveries"`
	Acks          uint64    `json:"acks"`
	Nacks         uint64    `json:"nacks"`
	Cancels       uint64    `json:"cancels"`
	// Lateness is the time from due to first delivery over the last
	// minute: the queue's own lateness plus any time messages waited for a
	// consumer to ask.
	Lateness struct {
		Count uint64  `json:"count"`
		P50   float64 `json:"p50"`
		P90   float64 `json:"p90"`
		P99   float64 `json:"p99"`
		Max   float64 `json:"max"`
	} `json:"lateness"`
	// QueueLateness is the queue's own recent lateness: how long after
	// their due time messages became available to receive. Zero for a
	// store that does not measure it.
	QueueLateness struct {
		P50 float64 `json:"p50"`
		P99 float64 `json:"p99"`
		Max float64 `json:"max"`
	} `json:"queue_lateness"`
}

// Stats returns the server's counts.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := c.do(ctx, http.MethodGet, "/v1/stats?history=0&forecast=0", nil, &st, true)
	return st, err
}
