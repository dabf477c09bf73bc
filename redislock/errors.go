package redislock

import "errors"

// Errors returned by the package. Compare with [errors.Is]: most are wrapped with the lock's name.
var (
	// ErrNotAcquired is returned by [Locker.TryLock] when another owner holds the lock.
	ErrNotAcquired = errors.New("redislock: not acquired: held by another owner")

	// ErrNotHeld is returned by [Lock.Unlock] when the lock is no longer held by the acquisition the Lock
	// stands for: its lease ran out or its key was deleted (for example by a Redis restart without
	// persistence). Work done under the lock since then may have overlapped with another holder.
	ErrNotHeld = errors.New("redislock: lock not held: lease expired or key deleted")

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
