package redislock

import "errors"

// Errors returned by the package. Compare with [errors.Is]: most are wrapped with the lock's name.
var (
	// ErrNotAcquired is returned by [Locker.TryLock] when another owner holds the lock.
	ErrNotAcquired = errors.New("redislock: not acquired: held by another owner")

	// ErrNotHeld is returned by [Lock.Unlock] when the lock is no longer held by the acquisition the
	// Lock stands for: its lease ran out (possibly while Redis could not be reached) or its key was
	// deleted (for example by a Redis restart without persistence). Work done under the lock since
	// then may have overlapped with another holder.
	ErrNotHeld = errors.New("redislock: lock not held: lease expired or key deleted")

	// ErrSlowReply is returned by [Locker.Lock] and [Locker.TryLock] when Redis granted the lock but
	// its reply came so late that the lease, counted from before the request, had ended (less the
	// safety margin of [Lock.Lost]): the lock would have been lost before it was returned. The Locker
	// has released the acquisition, or, if that failed too, left it to expire with its lease. A
	// retry may succeed once Redis or the network is fast again.
	ErrSlowReply = errors.New("redislock: reply too late: the lease ended before Redis answered")

	// ErrNotReplicated is returned by [Locker.Lock] and [Locker.TryLock] when the Redis master that
	// granted the lock has replicas but none of them acknowledged the acquisition within the time
	// set by [WithReplicaWait]: a failover could have lost it, and with it the lock. The Locker has
	// released the acquisition.
	ErrNotReplicated = errors.New("redislock: no replica acknowledged the acquisition")

	// ErrInvalidName is returned for an empty lock name or one containing '}', which would break
	// the {name} hash tag that keeps a lock's keys in one Redis Cluster slot.
	ErrInvalidName = errors.New("redislock: invalid lock name")

	// ErrInvalidOption is returned by [Locker.Lock] and [Locker.TryLock] when the call was given an
	// invalid [LockOption], such as a non-positive lease or an empty owner. [New] panics with an
	// error wrapping it for an invalid [Option] or a nil client.
	ErrInvalidOption = errors.New("redislock: invalid option")

	// ErrProtocol is returned when Redis answers a script with a reply of an unexpected shape, as
	// when the lock's keys were written by something that does not follow the package's layout.
	ErrProtocol = errors.New("redislock: unexpected reply from Redis")
)
