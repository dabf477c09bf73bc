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

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// A Client talks to one tockd server. It is safe for concurrent use.
type Client struct {
	base    string // scheme://host[/prefix], no trailing slash
	token   string
	http    *http.Client
	retries int
	backoff time.Duration
	co      *coalescer
}

// An Option configures a Client. A nil Option is ignored.
type Option func(*config)

// config is what the options set; New checks it.
type config struct {
	token      string
	http       *http.Client
	retries    int
	backoff    time.Duration
	coalescing int
}

// WithToken sends token as a bearer token with every request. An empty
// token, the default, sends none.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithHTTPClient makes the Client send its requests with hc. hc should have
// no overall Timeout shorter than the longest Receive wait; use contexts to
// bound calls instead. hc's transport should keep as many idle connections
// to the server as the Client makes requests at once (net/http's default
// transport keeps 2: the others are closed after their request and dialled
// again for the next). A nil hc means the default: a client of the
// Client's own, with net/http's default transport's settings but keeping
// up to [MaxIdleConns] idle connections, and a write buffer that sends a
// coalesced batch in one write.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.http = hc } }

// WithRetries sets how many times an idempotent call ([Client.Ack],
// [Client.Extend], [Client.Cancel], [Client.Stats], [Client.Healthy], [Client.Ready], and
// of the admin calls [Client.Topics], [Client.Messages], [Client.Message],
// [Client.DeliverNow], [Client.Pause] and [Client.Resume]) is retried, and the wait before the first retry. A call is retried after an error that
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

// MaxIdleConns is how many idle connections to the server the default
// transport of a Client keeps for its next requests (see [WithHTTPClient]).
const MaxIdleConns = 256

// writeBufferSize is the write buffer of each connection of the default
// transport: a request up to this size, headers and body, goes out in one
// write. net/http's default of 4 KiB wrote a batch of 32 coalesced puts of
// 100 bytes in two system calls. It holds the largest coalesced batch
// (maxCoalescedBytes) and its headers; a connection allocates it once.
const writeBufferSize = maxCoalescedBytes + 4<<10

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
	cfg := config{retries: 3, coalescing: DefaultCoalescing}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.retries < 0 || cfg.backoff < 0 {
		return nil, fmt.Errorf("%w: WithRetries(%d, %v): neither may be negative", ErrInvalidOption, cfg.retries, cfg.backoff)
	}
	if cfg.coalescing < 0 {
		return nil, fmt.Errorf("%w: WithCoalescing(%d): may not be negative", ErrInvalidOption, cfg.coalescing)
	}
	c := &Client{
		base:    strings.TrimSuffix(u.String(), "/"),
		token:   cfg.token,
		http:    cfg.http,
		retries: cfg.retries,
		backoff: cfg.backoff,
	}
	c.co = newCoalescer(cfg.coalescing, c)
	if c.http == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns, t.MaxIdleConnsPerHost = MaxIdleConns, MaxIdleConns
		t.WriteBufferSize = writeBufferSize
		c.http = &http.Client{Transport: t}
	}
	if c.backoff == 0 {
		c.backoff = 100 * time.Millisecond
	}
	return c, nil
}

// A Message is a message to put. With neither Delay nor DeliverAt it is due
// at once. Setting both is an error.
type Message struct {
	// ID names the message; empty lets the server choose one. A chosen ID is
	// unique among waiting messages: putting another message with it fails
	// with a [*queue.DuplicateError] (see [Client.Put]).
	ID string
	// Payload is any JSON value; nil sends no payload (delivered as null).
	Payload json.RawMessage
	// Delay is how long from the server's now the message is due.
	Delay time.Duration
	// DeliverAt is when the message is due.
	DeliverAt time.Time
	// Replace, with an ID, replaces the message waiting under it, unless it
	// is leased (see queue.Message.Replace). PutBatch refuses it.
	Replace bool
	// Headers are strings delivered with the message (see [queue.Message.Headers] for what is
	// valid). Put refuses headers [queue.CheckHeaders] refuses without a request, with its
	// error. The map is read, not kept: the caller may change it once Put returns.
	//
	// When the context of Put or PutBatch carries an OpenTelemetry span, the W3C trace context
	// of that span ("traceparent", and "tracestate" when it has one) is added to the headers
	// sent (not to this map), unless the caller set either header itself, so that the worker
	// that handles the message continues the trace (see package worker). The HTTP request
	// carries the same trace context in its own headers, for tockd's span of it.
	Headers map[string]string
}

// A PutResult is the server's answer to a put: the message's ID, and
// DeliverAt, when it is due: the later of the time asked for and the
// server's now.
type PutResult = api.PutResponse

// A Delivery is a due message leased to this consumer until it is acked,
// nacked, or its visibility timeout passes. Receipt names the lease for
// [Client.Ack] and [Client.Nack]; Attempt counts deliveries, 1 the first
// time.
type Delivery = api.Delivery

// Stats is the server's report from GET /v1/stats: the engine's counts,
// the server's totals since it started and lateness, in seconds.
// [Client.Stats] leaves its History and Forecast empty; [Client.Forecast]
// asks for the forecast.
type Stats = api.Stats

// A Forecast counts the scheduled messages falling due in each second from
// Start (a Unix second) on.
type Forecast = api.Forecast

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

// rawBody is a request body already encoded as JSON.
type rawBody []byte

func (m Message) request() (api.PutRequest, error) {
	r := api.PutRequest{ID: m.ID, Payload: m.Payload, Replace: m.Replace}
	if len(m.Headers) > 0 {
		if err := queue.CheckHeaders(m.Headers); err != nil {
			return r, fmt.Errorf("client: message %q: %w", m.ID, err)
		}
		r.Headers = m.Headers
	}
	switch {
	case m.Delay != 0 && !m.DeliverAt.IsZero():
		return r, fmt.Errorf("client: message %q sets both Delay and DeliverAt", m.ID)
	case m.Delay < 0:
		return r, fmt.Errorf("client: message %q has a negative delay %v", m.ID, m.Delay)
	case m.Delay > 0:
		r.Delay = ptr(m.Delay.String())
	case !m.DeliverAt.IsZero():
		r.DeliverAt = ptr(m.DeliverAt.Format(api.TimeFormat))
	}
	return r, nil
}

func ptr[T any](v T) *T { return &v }

// Put schedules m on topic and returns its ID and due time once the server
// has stored it durably. It is not retried (see the package doc). Puts of
// one topic made while the Client is busy share requests (see
// [WithCoalescing]).
//
// When m.ID names a message still waiting, Put stores nothing: it succeeds
// with the same ID if that message is the same one (a retried Put: same
// topic, payload and due time, which only an absolute DeliverAt can give
// twice, or due at once both times: neither Delay nor DeliverAt, or a
// DeliverAt in the past, while the waiting message is due), and otherwise fails with an [*Error] whose Err is a
// [*queue.DuplicateError] giving the waiting message's due time; the error
// matches [queue.ErrDuplicate].
func (c *Client) Put(ctx context.Context, topic string, m Message) (PutResult, error) {
	m.Headers = traceHeaders(ctx, m.Headers)
	r, err := m.request()
	if err != nil {
		return PutResult{}, err
	}
	body := r.AppendJSON(make([]byte, 0, bodySize(&r)))
	if m.Replace {
		// A batch does not replace: a replace is never coalesced.
		return c.putOne(ctx, topic, body)
	}
	return c.put(ctx, topic, body)
}

// bodySize is about the size of r as AppendJSON writes it, so that it is written in one
// allocation rather than grown three times: its values, and 64 bytes for the names and
// punctuation of its fields (and 6 more a header). A string that needs escapes takes more, and
// append grows the buffer then.
func bodySize(r *api.PutRequest) int {
	n := 64 + len(r.ID) + len(r.Payload)
	for k, v := range r.Headers {
		n += len(k) + len(v) + 6
	}
	return n
}

// PutBatch schedules all of ms on topic, or none of them, and returns their
// IDs in order. A chosen ID of a waiting message fails the batch as it
// fails a [Client.Put], unless every message of the batch is a retry.
func (c *Client) PutBatch(ctx context.Context, topic string, ms []Message) ([]string, error) {
	b := api.BatchRequest{Messages: make([]api.PutRequest, len(ms))}
	size := 16
	for i, m := range ms {
		m.Headers = traceHeaders(ctx, m.Headers)
		r, err := m.request()
		if err != nil {
			return nil, err
		}
		b.Messages[i] = r
		size += bodySize(&r)
	}
	var res api.BatchResponse
	err := c.do(ctx, http.MethodPost, api.BatchPath(topic), rawBody(b.AppendJSON(make([]byte, 0, size))), &res, false)
	return res.IDs, maybeStored(err)
}

// Cancel removes the waiting message id. It reports false, with a nil
// error, when the server answers that no such message is waiting (never
// put, already acked or cancelled). Any other 404, such as the one for a
// path no route has when the Client's base URL is wrong, is an [*Error].
// An empty id names no message: Cancel refuses it with an error matching
// [queue.ErrInvalid] without asking the server.
//
// Cancel is retried (see [WithRetries]), so when an attempt cancelled the
// message but its answer was lost, the retry finds nothing waiting and
// Cancel reports false: false means "not waiting now", not "was never
// cancelled".
func (c *Client) Cancel(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, fmt.Errorf("client: Cancel: empty message id: %w", queue.ErrInvalid)
	}
	err := c.do(ctx, http.MethodDelete, api.CancelPath(id), nil, nil, true)
	var e *Error
	if errors.As(err, &e) && e.StatusCode == http.StatusNotFound && e.Code == api.CodeNotFound {
		return false, nil
	}
	return err == nil, err
}

// Receive leases up to opts.Max due messages of topic, waiting up to
// opts.Wait for the first. An empty result with a nil error means none
// came due in time.
func (c *Client) Receive(ctx context.Context, topic string, opts ReceiveOptions) ([]Delivery, error) {
	var req api.ReceiveRequest
	if opts.Max != 0 {
		req.Max = &opts.Max
	}
	if opts.Wait != 0 {
		req.Wait = ptr(opts.Wait.String())
	}
	if opts.Visibility != 0 {
		req.Visibility = ptr(opts.Visibility.String())
	}
	var res api.ReceiveResponse
	err := c.do(ctx, http.MethodPost, api.ReceivePath(topic), req, &res, false)
	return res.Messages, err
}

// Ack ends the leases of receipts: their messages are never delivered
// again. It returns nil when every receipt was acked. When the server acked
// some and not others (forged, malformed, or stale: the message was leased
// to another consumer since), it returns a [*queue.AckError] listing the
// receipts not acked, in order, each with a reason that matches
// [queue.ErrUnknownReceipt] and is an [*Error] of the server's answer (400,
// code [api.CodeUnknownReceipt]); the receipts it does not list were acked,
// so a caller can retry exactly those that failed or drop them. Any other
// error leaves the outcome of each receipt unknown. An ack of a receipt
// whose message is already done succeeds (the queue contract makes acks
// idempotent), so Ack is retried as Cancel is (see [WithRetries]): a retry
// after a lost answer succeeds for the receipts the first attempt acked.
// Acks made while the Client is busy share requests (see
// [WithCoalescing]).
func (c *Client) Ack(ctx context.Context, receipts ...string) error {
	return c.ack(ctx, receipts)
}

// ackOne sends one ack of receipts.
func (c *Client) ackOne(ctx context.Context, receipts []string) error {
	err := c.do(ctx, http.MethodPost, api.PathAck, api.AckRequest{Receipts: receipts}, nil, true)
	var e *Error
	if errors.As(err, &e) && e.failed != nil {
		if ae := ackError(receipts, e); ae != nil {
			return ae
		}
	}
	return err
}

// ackError returns the *queue.AckError of the answer e to an ack of
// receipts, or nil if the answer does not fit the request.
func ackError(receipts []string, e *Error) error {
	failed := e.receiptErrors(receipts, "receipt not acked: unknown or stale")
	if failed == nil {
		return nil
	}
	return &queue.AckError{Failed: failed}
}

// receiptErrors returns the receipts of the request e answered that it
// lists as failed, each with the error msg, or nil if the answer does not
// fit the request.
func (e *Error) receiptErrors(receipts []string, msg string) []queue.ReceiptError {
	reason := &Error{StatusCode: e.StatusCode, Code: e.Code, Message: msg}
	out := make([]queue.ReceiptError, 0, len(e.failed))
	for _, i := range e.failed {
		if i < 0 || i >= len(receipts) {
			return nil
		}
		out = append(out, queue.ReceiptError{Receipt: receipts[i], Err: reason})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Nack ends the lease of receipt and makes its message due again after
// delay (zero: at once). A negative delay is refused by the server (an
// [*Error] matching [queue.ErrInvalid]). [queue.WithReason] says why the
// delivery failed, kept as the message's last failure;
// [queue.WithDeadLetter] fails the message for good, to its dead-letter
// topic at once (delay must then be zero). A reason [queue.NackOptionsOf]
// refuses is refused without a request.
func (c *Client) Nack(ctx context.Context, receipt string, delay time.Duration, opts ...queue.NackOption) error {
	o, err := queue.NackOptionsOf(opts)
	if err != nil {
		return fmt.Errorf("client: Nack: %w", err)
	}
	req := api.NackRequest{Receipt: receipt, Reason: o.Reason, DeadLetter: o.DeadLetter}
	if delay != 0 {
		if o.DeadLetter {
			return fmt.Errorf("client: Nack to the dead letters with a delay of %v: the message goes at once: %w", delay, queue.ErrInvalid)
		}
		req.Delay = ptr(delay.String())
	}
	return c.do(ctx, http.MethodPost, api.PathNack, req, nil, false)
}

// Extend moves the end of the lease of receipt to visibility from the
// server's now. A receipt of no current lease (run out, acked or nacked)
// fails with an [*Error] matching [queue.ErrUnknownReceipt]; a visibility
// that is not positive is refused without a request ([queue.ErrInvalid]).
// Extend is retried (see [WithRetries]): a repeat only sets the same end
// again, a little later. Extends made while the Client is busy share
// requests (see [WithCoalescing]), as [Client.ExtendBatch] does.
func (c *Client) Extend(ctx context.Context, receipt string, visibility time.Duration) error {
	if visibility <= 0 {
		return fmt.Errorf("client: Extend visibility %v: %w", visibility, queue.ErrInvalid)
	}
	return c.extend(ctx, receipt, visibility)
}

// ExtendBatch moves the end of the leases of receipts to visibility from
// the server's now, in one request. It returns nil when every lease was
// extended. When the server extended some and not others (they name no
// current lease), it returns a [*queue.ExtendError] listing those not
// extended, in order, each with a reason that matches
// [queue.ErrUnknownReceipt] and is an [*Error] of the server's answer; the
// receipts it does not list were extended. Any other error leaves the
// outcome of each receipt unknown. A visibility that is not positive is
// refused without a request ([queue.ErrInvalid]); no receipts is nil. A
// tockd older than this Client, which takes one receipt per extend, is
// sent one request per receipt. ExtendBatch is retried as Extend is.
func (c *Client) ExtendBatch(ctx context.Context, receipts []string, visibility time.Duration) error {
	if visibility <= 0 {
		return fmt.Errorf("client: ExtendBatch visibility %v: %w", visibility, queue.ErrInvalid)
	}
	if len(receipts) == 0 {
		return nil
	}
	if len(receipts) == 1 || c.co.noExtendBatch.Load() {
		return c.extendEach(ctx, receipts, visibility, false)
	}
	err := c.extendSeveral(ctx, receipts, visibility)
	if refusedWhole(err) {
		// Maybe a tockd that takes one receipt per extend.
		return c.extendEach(ctx, receipts, visibility, true)
	}
	return err
}

// extendOne sends an extend of one receipt.
func (c *Client) extendOne(ctx context.Context, receipt string, visibility time.Duration) error {
	req := api.ExtendRequest{Receipt: receipt, Visibility: visibility.String()}
	return c.do(ctx, http.MethodPost, api.PathExtend, req, nil, true)
}

// extendSeveral sends one extend of receipts (with "receipts"). Its error
// is a *queue.ExtendError when the server extended some of them and not
// others, and otherwise leaves the outcome of every receipt unknown.
func (c *Client) extendSeveral(ctx context.Context, receipts []string, visibility time.Duration) error {
	req := api.ExtendRequest{Receipts: receipts, Visibility: visibility.String()}
	err := c.do(ctx, http.MethodPost, api.PathExtend, req, nil, true)
	var e *Error
	if errors.As(err, &e) && e.failed != nil {
		if failed := e.receiptErrors(receipts, notExtended); failed != nil {
			return &queue.ExtendError{Failed: failed}
		}
	}
	return err
}

// notExtended is the message of the error of a receipt an extend of
// several did not extend.
const notExtended = "lease not extended: no current lease"

// extendEach extends each of receipts with a request of its own, in turn,
// and gathers those the server refused as of no current lease in a
// *queue.ExtendError; any other error ends it. after says an extend of
// several was refused whole: when any of these succeeds, the server is one
// that takes one receipt per extend, and Extends are no longer coalesced.
func (c *Client) extendEach(ctx context.Context, receipts []string, visibility time.Duration, after bool) error {
	var failed []queue.ReceiptError
	for _, rc := range receipts {
		err := c.extendOne(ctx, rc, visibility)
		switch {
		case err == nil:
			if after {
				c.co.noExtendBatch.Store(true)
			}
		case errors.Is(err, queue.ErrUnknownReceipt):
			failed = append(failed, queue.ReceiptError{Receipt: rc, Err: err})
		default:
			return err
		}
	}
	if len(failed) == 0 {
		return nil
	}
	if len(receipts) == 1 {
		return failed[0].Err
	}
	return &queue.ExtendError{Failed: failed}
}

// refusedWhole reports whether err is the server's refusal of a request
// as a whole, as bad (400, code bad_request): nothing of it was done.
func refusedWhole(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == http.StatusBadRequest && e.Code == api.CodeBadRequest
}

// Healthy returns nil when the server process answers /healthz.
func (c *Client) Healthy(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, api.PathHealth, nil, nil, true)
}

// Ready returns nil when the server answers /readyz with 200: its engine is
// ready and it is not shutting down. Otherwise the error, a 503, says why
// and matches [queue.ErrUnavailable].
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, api.PathReady, nil, nil, true)
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
	injectHTTP(ctx, req.Header)
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
		// An error answer is bounded by its request (an ack's lists an index
		// per failed receipt) plus a bounded message.
		data, _ := io.ReadAll(io.LimitReader(resp.Body, int64(len(body))+64<<10))
		e := errorOf(resp.StatusCode, data)
		return e.Temporary(), retryAfter(resp.Header.Get("Retry-After"), time.Now()), e
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return false, 0, nil
	}
	if st, ok := out.(statusTaker); ok {
		st.takeStatus(resp.StatusCode)
	}
	data, err := readAnswer(resp.Body, resp.ContentLength)
	if err == nil {
		err = decodeAnswer(data, out)
	}
	if err != nil {
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

// Stats returns the server's counts, totals and lateness.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := c.do(ctx, http.MethodGet, statsPath(0, 0), nil, &st, true)
	return st, err
}

// MaxForecast is the most seconds [Client.Forecast] may ask for.
const MaxForecast = 3600

// Forecast returns how many scheduled messages fall due in each of the next
// seconds, from the second after the server's now: the wheel of the status
// page. seconds must be from 0 to [MaxForecast].
func (c *Client) Forecast(ctx context.Context, seconds int) (Forecast, error) {
	if seconds < 0 || seconds > MaxForecast {
		return Forecast{}, fmt.Errorf("client: Forecast of %d seconds: want 0 to %d: %w", seconds, MaxForecast, queue.ErrInvalid)
	}
	var st Stats
	err := c.do(ctx, http.MethodGet, statsPath(0, seconds), nil, &st, true)
	return st.Forecast, err
}

func statsPath(history, forecast int) string {
	return fmt.Sprintf("%s?%s=%d&%s=%d", api.PathStats, api.QueryHistory, history, api.QueryForecast, forecast)
}
