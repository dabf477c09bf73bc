package api

import "net/url"

// The routes of the API, as [net/http.ServeMux] patterns. The server registers them, labels its
// metrics with them, and a client builds its paths with the functions below.
const (
	RoutePut     = "POST /v1/topics/{topic}/messages"
	RouteBatch   = "POST /v1/topics/{topic}/batch"
	RouteCancel  = "DELETE /v1/messages/{id}"
	RouteReceive = "POST /v1/topics/{topic}/receive"
	RouteAck     = "POST " + PathAck
	RouteNack    = "POST " + PathNack
	RouteExtend  = "POST " + PathExtend
	RouteStats   = "GET " + PathStats
	RouteHealth  = "GET " + PathHealth
	RouteReady   = "GET " + PathReady
	RouteMetrics = "GET /metrics"
	// RouteOpenAPI serves the API's OpenAPI document ([OpenAPI]); like RouteHealth, it needs no
	// token.
	RouteOpenAPI = "GET " + PathOpenAPI
	// RouteStatusPage serves the status page, for people in a browser.
	RouteStatusPage = "GET /{$}"

	// Routes that operate the queue; they need an engine that is a queue.Admin, and are answered
	// 501 (CodeNotImplemented) otherwise.
	RouteTopics   = "GET " + PathTopics
	RouteMessages = "GET /v1/topics/{topic}/messages"
	RouteMessage  = "GET /v1/messages/{id}"
	RouteDeliver  = "POST /v1/messages/{id}/deliver"
	RouteRequeue  = "POST /v1/topics/{topic}/requeue"
	RoutePurge    = "POST /v1/topics/{topic}/purge"
	RoutePause    = "POST /v1/topics/{topic}/pause"
	RouteResume   = "POST /v1/topics/{topic}/resume"

	// Routes of delivery limits; they need an engine that is a queue.Limiter, and are answered 501
	// (CodeNotImplemented) otherwise.
	RouteLimits      = "GET " + PathLimits
	RouteSetLimit    = "PUT /v1/topics/{topic}/limit"
	RouteRemoveLimit = "DELETE /v1/topics/{topic}/limit"
)

// Paths of the routes that name no topic or message.
const (
	PathAck     = "/v1/ack"
	PathNack    = "/v1/nack"
	PathExtend  = "/v1/extend"
	PathStats   = "/v1/stats"
	PathHealth  = "/healthz"
	PathReady   = "/readyz"
	PathOpenAPI = "/openapi.json"
	PathTopics  = "/v1/topics"
	PathLimits  = "/v1/limits"
)

// PutPath returns the path of [RoutePut] for topic, escaped.
func PutPath(topic string) string { return topicPath(topic, "messages") }

// BatchPath returns the path of [RouteBatch] for topic, escaped.
func BatchPath(topic string) string { return topicPath(topic, "batch") }

// ReceivePath returns the path of [RouteReceive] for topic, escaped.
func ReceivePath(topic string) string { return topicPath(topic, "receive") }

// CancelPath returns the path of [RouteCancel] for the message id, escaped.
func CancelPath(id string) string { return "/v1/messages/" + url.PathEscape(id) }

// MessagesPath returns the path of [RouteMessages] for topic, escaped, without its query.
func MessagesPath(topic string) string { return topicPath(topic, "messages") }

// MessagePath returns the path of [RouteMessage] for the message id, escaped.
func MessagePath(id string) string { return "/v1/messages/" + url.PathEscape(id) }

// DeliverPath returns the path of [RouteDeliver] for the message id, escaped.
func DeliverPath(id string) string { return MessagePath(id) + "/deliver" }

// RequeuePath returns the path of [RouteRequeue] for topic, escaped.
func RequeuePath(topic string) string { return topicPath(topic, "requeue") }

// PurgePath returns the path of [RoutePurge] for topic, escaped.
func PurgePath(topic string) string { return topicPath(topic, "purge") }

// PausePath returns the path of [RoutePause] for topic, escaped.
func PausePath(topic string) string { return topicPath(topic, "pause") }

// LimitPath returns the path of [RouteSetLimit] and [RouteRemoveLimit] for topic, escaped.
func LimitPath(topic string) string { return topicPath(topic, "limit") }

// ResumePath returns the path of [RouteResume] for topic, escaped.
func ResumePath(topic string) string { return topicPath(topic, "resume") }

func topicPath(topic, what string) string { return "/v1/topics/" + url.PathEscape(topic) + "/" + what }

// Query parameters of [RouteStats]: how many seconds of history and of forecast to include.
const (
	QueryHistory  = "history"
	QueryForecast = "forecast"
)
