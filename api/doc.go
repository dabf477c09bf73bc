// Package api is the wire of tockd's HTTP API, defined once: the routes, the JSON bodies of the
// requests and answers, the error codes and how times are written. Package server answers with
// these types and package client sends and reads them, so the two cannot drift apart. It depends
// on the standard library only.
//
// # Basics
//
// Every request and answer body is one JSON object. A request body is sent with
// "Content-Type: application/json". The server decodes requests strictly: a field not named here
// is refused, so a misspelt "delay" is an error rather than a message due now. That is why the
// optional fields of requests are pointers: the server tells a field that is absent from one that
// is present and empty or zero, and refuses the second where it is invalid.
//
//	POST   /v1/topics/{topic}/messages  PutRequest      201 PutResponse; 409 DuplicateBody
//	POST   /v1/topics/{topic}/batch     BatchRequest    201 BatchResponse; 409 DuplicateBody
//	DELETE /v1/messages/{id}                            204, or 404 ErrorBody (CodeNotFound)
//	POST   /v1/topics/{topic}/receive   ReceiveRequest  200 ReceiveResponse
//	POST   /v1/ack                      AckRequest      204; 400 AckErrorBody (CodeUnknownReceipt)
//	POST   /v1/nack                     NackRequest     204
//	POST   /v1/extend                   ExtendRequest   204; 400 ErrorBody or, for Receipts,
//	                                                    ExtendErrorBody (CodeUnknownReceipt)
//	GET    /v1/stats?history=&forecast=                 200 Stats
//
// The routes that operate the queue (answered 501, CodeNotImplemented, by an engine that cannot):
//
//	GET    /v1/topics                                   200 TopicsResponse
//	GET    /v1/topics/{topic}/messages?state=&cursor=&limit=
//	                                                    200 MessagesResponse
//	GET    /v1/messages/{id}                            200 MessageInfo with Payload; 404 (CodeNotFound)
//	POST   /v1/messages/{id}/deliver    (no body)       200 MovedResponse; 404 (CodeNotFound)
//	POST   /v1/topics/{topic}/requeue   RequeueRequest  200 MovedResponse
//	POST   /v1/topics/{topic}/purge     PurgeRequest    200 PurgeResponse
//	POST   /v1/topics/{topic}/pause     (no body)       200 PauseResponse
//	POST   /v1/topics/{topic}/resume    (no body)       200 PauseResponse
//
// The routes of delivery limits (answered 501 by an engine that has none):
//
//	GET    /v1/limits                                   200 LimitsResponse
//	PUT    /v1/topics/{topic}/limit     Limit           200 Limit (as kept, its default burst filled in)
//	DELETE /v1/topics/{topic}/limit                     204
//
// The same, with every error status and the auth, is an OpenAPI 3.1 document, [OpenAPI], which the
// server serves at [PathOpenAPI] for clients in other languages.
//
// Every error answer is an [ErrorBody], with more fields for a duplicate ([DuplicateBody]), a
// partial ack ([AckErrorBody]) and a partial extension ([ExtendErrorBody]). Its Code, one of the
// Code constants, is what programs compare; the message is for people and may change.
//
// A message may carry headers ([PutRequest].Headers), strings delivered with it ([Delivery].Headers)
// and shown by the routes that operate the queue ([MessageInfo].Headers).
//
// Times are RFC 3339 with nanoseconds ([TimeFormat]). Answers write them in UTC, as
// encoding/json writes a [time.Time] in UTC; requests may use any offset. Durations are Go
// duration strings such as "250ms", "10s" or "1h30m".
//
// # Caveats
//
// The package holds the shapes, not the rules: which values the server accepts (names, limits,
// the range of due times) is the server's documentation. Payloads are any JSON value and are
// passed as they are, compacted; the types keep them as [encoding/json.RawMessage].
package api
