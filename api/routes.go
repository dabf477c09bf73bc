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
	RouteStats   = "GET " + PathStats
	RouteHealth  = "GET " + PathHealth
	RouteReady   = "GET " + PathReady
	RouteMetrics = "GET /metrics"
)

// Paths of the routes that name no topic or message.
const (
	PathAck    = "/v1/ack"
	PathNack   = "/v1/nack"
	PathStats  = "/v1/stats"
	PathHealth = "/healthz"
	PathReady  = "/readyz"
)

// PutPath returns the path of [RoutePut] for topic, escaped.
func PutPath(topic string) string { return topicPath(topic, "messages") }

// BatchPath returns the path of [RouteBatch] for topic, escaped.
func BatchPath(topic string) string { return topicPath(topic, "batch") }

// ReceivePath returns the path of [RouteReceive] for topic, escaped.
func ReceivePath(topic string) string { return topicPath(topic, "receive") }

// CancelPath returns the path of [RouteCancel] for the message id, escaped.
func CancelPath(id string) string { return "/v1/messages/" + url.PathEscape(id) }

func topicPath(topic, what string) string { return "/v1/topics/" + url.PathEscape(topic) + "/" + what }

// Query parameters of [RouteStats]: how many seconds of history and of forecast to include.
const (
	QueryHistory  = "history"
	QueryForecast = "forecast"
)
