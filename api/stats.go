package api

import "time"

// Stats is the answer of [RouteStats]: the engine's counts, the server's totals since it started,
// lateness, the recent history and the forecast of what falls due. Totals and history are kept in
// the server's memory: they start from zero when it restarts.
//
// The counts use the words of the queue contract: a message is scheduled until its due time, then
// due until a consumer leases it, then leased until it is acked, nacked or its lease runs out.
type Stats struct {
	Time          time.Time `json:"time"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// Scheduled counts messages waiting for their due time.
	Scheduled int64 `json:"scheduled"`
	// Due counts messages due and waiting for a consumer, dead letters included.
	Due int64 `json:"due"`
	// Leased counts messages delivered and neither acked, nacked nor expired.
	Leased     int64  `json:"leased"`
	Puts       uint64 `json:"puts"`
	Deliveries uint64 `json:"deliveries"`
	Acks       uint64 `json:"acks"`
	Nacks      uint64 `json:"nacks"`
	Cancels    uint64 `json:"cancels"`
	// Lateness is the time from due to first delivery over the last minute: the engine's own
	// lateness plus any time messages waited for a consumer to ask.
	Lateness Lateness `json:"lateness"`
	// QueueLateness is the engine's own lateness: how long after their due time recent messages
	// became available to receive, whether or not a consumer was there to take them.
	QueueLateness QueueLateness `json:"queue_lateness"`
	// History is the last seconds, as many as the query's history parameter asks.
	History History `json:"history"`
	// Forecast is the next seconds, as many as the query's forecast parameter asks.
	Forecast Forecast `json:"forecast"`
}

// Lateness summarizes delivery lateness, in seconds, over a window.
type Lateness struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// QueueLateness summarizes the engine's recent lateness, in seconds. It is zero for an engine that
// does not measure it.
type QueueLateness struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// History is the per-second record of the last seconds, oldest first, from Start (a Unix second)
// on. Lateness percentiles are in seconds, -1 for a second without deliveries.
type History struct {
	Start      int64     `json:"start"`
	Puts       []uint32  `json:"puts"`
	Deliveries []uint32  `json:"deliveries"`
	Acks       []uint32  `json:"acks"`
	LateP50    []float64 `json:"lateness_p50"`
	LateP99    []float64 `json:"lateness_p99"`
}

// Forecast counts the scheduled messages falling due in each second from Start (a Unix second) on:
// Due[i] in [Start+i, Start+i+1).
type Forecast struct {
	Start int64 `json:"start"`
	Due   []int `json:"due"`
}
