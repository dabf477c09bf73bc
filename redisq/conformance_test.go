package redisq

import (
	"testing"

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

func TestConformanceCluster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1})
	queuetest.Run(t, opener(clusterClient(t, c.Addrs())))
}
