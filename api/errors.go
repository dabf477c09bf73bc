package api

import "time"

// Error codes: the Code of every error answer. A code is what a program compares; it never
// changes meaning. The status each goes with is in its comment.
const (
	CodeBadRequest      = "bad_request"            // 400: a malformed or invalid request
	CodeUnknownReceipt  = "unknown_receipt"        // 400: a receipt that names no current lease
	CodeUnauthorized    = "unauthorized"           // 401: a missing or wrong token
	CodeCrossOrigin     = "cross_origin"           // 403: a browser request from another origin
	CodeNotFound        = "not_found"              // 404: the message named is not waiting
	CodeNoRoute         = "no_route"               // 404: no route has this path (a wrong base URL)
	CodeMethod          = "method_not_allowed"     // 405: the route exists for other methods
	CodeBodyTimeout     = "body_timeout"           // 408: the body did not arrive in time
	CodeHeaderTimeout   = "header_timeout"         // 408: the request headers did not arrive in time
	CodeDuplicate       = "duplicate"              // 409: a chosen ID names another waiting message
	CodeTooLarge        = "too_large"              // 413: a payload, batch or body over a limit
	CodeMediaType       = "unsupported_media_type" // 415: a body that is not application/json
	CodeExpectation     = "expectation_failed"     // 417: an Expect header other than 100-continue
	CodeWrongHost       = "wrong_host"             // 421: a Host the server does not answer to
	CodeHeadersTooLarge = "headers_too_large"      // 431: request headers over the limit
	CodeInternal        = "internal"               // 500: the engine failed
	CodeNotImplemented  = "not_implemented"        // 501: an unsupported transfer encoding, or an engine that cannot be operated
	CodeUnavailable     = "unavailable"            // 503: engine unavailable or closed, shutting down, at the connection limit
	CodeHTTPVersion     = "http_version"           // 505: an HTTP version other than 1.x
	CodeOther           = "error"                  // any other status
)

// ErrorBody is the body of every error answer, {"error": "...", "code": "..."}.
type ErrorBody struct {
	// Message says what is wrong, in words, bounded in size.
	Message string `json:"error"`
	// Code is one of the Code constants.
	Code string `json:"code"`
}

// DuplicateBody is the answer 409 ([CodeDuplicate]) to a put or batch whose chosen ID names a
// waiting message that differs from the one put. Nothing of the request was stored.
type DuplicateBody struct {
	ErrorBody
	// ID is the chosen ID.
	ID string `json:"id"`
	// DeliverAt is the due time of the message already waiting.
	DeliverAt time.Time `json:"deliver_at"`
	// Leased reports a put with "replace" that found the message leased, which is not replaced.
	Leased bool `json:"leased,omitempty"`
}

// AckErrorBody is the answer 400 ([CodeUnknownReceipt]) of [RouteAck] when some receipts were not
// acked: forged, malformed, or stale (the message was leased to another consumer since). The
// receipts it does not list were acked. A receipt whose message is already done counts as acked.
type AckErrorBody struct {
	ErrorBody
	// Acked counts the receipts that were acked.
	Acked int `json:"acked"`
	// Failed holds the indexes, in the request's receipts, of those that were not acked, in
	// increasing order. The indexes take no more room than the receipts of the request (the server
	// refuses whole an ack of receipts too short for that, which no engine issues), so the answer
	// is never larger than the request beyond its bounded message.
	Failed []int `json:"failed"`
}

// ExtendErrorBody is the answer 400 ([CodeUnknownReceipt]) of [RouteExtend] with Receipts when
// some receipts were not extended: they name no current lease (forged, malformed, run out, acked
// or nacked). The receipts it does not list were extended.
type ExtendErrorBody struct {
	ErrorBody
	// Extended counts the receipts that were extended.
	Extended int `json:"extended"`
	// Failed holds the indexes, in the request's receipts, of those that were not extended, in
	// increasing order; as in [AckErrorBody], never larger than the request's receipts.
	Failed []int `json:"failed"`
}
