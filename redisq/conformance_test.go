package redisq

import (
	"testing"
	"time"

	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue/queuetest"
)

func TestConformanceSingleServer(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	queuetest.Run(t, opener(singleClient(t, s.Addr)))
}

func TestConformanceOneShard(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	queuetest.Run(t, opener(singleClient(t, s.Addr), WithShards(1)))
}

// TestConformanceCluster runs the contract on a cluster whose masters each have a replica. Every
// write waits for its replica (WAIT) as by default, but for up to a minute, not a second: a busy
// machine can keep a healthy replica from confirming within a second (a PutReceiveAck failed so
// under the race detector at load 25), and what a replica too slow does is what the failover tests
// check (TestReplicaStoppedThenMasterKilled), not the contract.
func TestConformanceCluster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1})
	queuetest.Run(t, opener(clusterClient(t, c.Addrs()), WithReplicaWait(1, time.Minute)))
}
