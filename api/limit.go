package api

// Limit is a topic's delivery limit: the body of [RouteSetLimit] (Topic absent), its answer, and an
// item of [LimitsResponse]. Rate is the most deliveries a second (0: none), Burst how many the rate
// lets through at once (0 with a rate: a tenth of a second of it, at least 1), Concurrency the most
// messages of the topic leased at once (0: no bound). A limit binds every consumer of the queue;
// an absent field is 0.
type Limit struct {
	Topic       string  `json:"topic,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	Burst       int     `json:"burst,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
}

// LimitsResponse is the answer of [RouteLimits]: every topic with a limit, by name. Limits is empty,
// not null, when there is none.
type LimitsResponse struct {
	Limits []Limit `json:"limits"`
}
