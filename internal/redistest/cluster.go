package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds the wait for a new one-node cluster to report itself healthy. Redis holds a
// master back for two seconds after it gains its slots before it accepts writes.
const clusterTimeout = 20 * time.Second

// StartCluster starts a one-node Redis Cluster: a redis-server in cluster mode that owns all 16384
// hash slots. It enforces what a real cluster does of clients (keys of one command or script in one
// slot, cluster-aware routing), so a *redis.ClusterClient can be tested against it. It returns once
// the cluster reports itself healthy, which takes about two seconds. Like Start, it returns nil only
// after calling t.Skip.
func StartCluster(t testing.TB, args ...string) *Server {
	t.Helper()
	s := Start(t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}, args...)...)
	if s == nil {
		return nil
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("redistest: assign slots: %v", err)
	}
	// Redis offers no notification of the state change, so ask until it is reported.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return s
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("redistest: cluster not healthy within %v (last error %v):\n%s", clusterTimeout, err, info)
		}
	}
}
