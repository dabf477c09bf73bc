// Package rediskit is what tock's Redis packages, redislock and redisq, know about Redis itself,
// kept in one place so that they agree: how Redis Cluster maps a key to its hash slot ([Slot]),
// and what an error of go-redis means for the command that got it: whether Redis refused it
// before it ran ([Refused]), whether sending it again may pass ([Transient]), whether the
// cluster's topology may have changed so that the client should reload it ([Reloads]), and what
// happened, in words an operator can act on ([Describe]).
package rediskit
