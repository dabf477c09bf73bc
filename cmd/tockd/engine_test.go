package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/internal/rediskit"
)

// TestRedisTargets checks which client each form of -redis makes, and with
// which addresses and settings.
func TestRedisTargets(t *testing.T) {
	for _, tc := range []struct {
		target string
		kind   string
		addrs  []string // the server's, the cluster's seeds, or the Sentinels'
		master string   // Sentinel's master name
	}{
		{"redis://10.0.0.1:6380/2", "server", []string{"10.0.0.1:6380"}, ""},
		{"rediss://user:pw@redis.example", "server", []string{"redis.example:6379"}, ""},
		{"unix:///run/redis.sock", "server", []string{"/run/redis.sock"}, ""},
		{"10.0.0.1:7000", "cluster", []string{"10.0.0.1:7000"}, ""},
		{"10.0.0.1:7000, 10.0.0.2:7000,10.0.0.3:7000,", "cluster", []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}, ""},
		{"[::1]:7000,[::1]:7001", "cluster", []string{"[::1]:7000", "[::1]:7001"}, ""},
		{"redis://:pw@10.0.0.1:7000?addr=10.0.0.2:7000", "cluster", []string{"10.0.0.1:7000", "10.0.0.2:7000"}, ""},
		{"redis-sentinel://10.0.0.1:26379?master_name=main&addr=10.0.0.2:26379", "sentinel", []string{"10.0.0.1:26379", "10.0.0.2:26379"}, "main"},
		{"rediss-sentinel://s.example:26379?master_name=main", "sentinel", []string{"s.example:26379"}, "main"},
	} {
		rt, err := parseRedisTarget(tc.target)
		if err != nil {
			t.Errorf("%s: %v", tc.target, err)
			continue
		}
		var addrs []string
		var master string
		switch {
		case rt.Cluster != nil:
			addrs = rt.Cluster.Addrs
			if iv := rt.Cluster.ClusterStateReloadInterval; iv != rediskit.ClusterReload {
				t.Errorf("%s: cluster state reloaded every %v, want %v", tc.target, iv, rediskit.ClusterReload)
			}
		case rt.Sentinel != nil:
			addrs, master = rt.Sentinel.SentinelAddrs, rt.Sentinel.MasterName
		case rt.Server != nil:
			addrs = []string{rt.Server.Addr}
		}
		if rt.Kind != tc.kind || !slices.Equal(addrs, tc.addrs) || master != tc.master {
			t.Errorf("%s: %s %v %q; want %s %v %q", tc.target, rt.Kind, addrs, master, tc.kind, tc.addrs, tc.master)
		}
		rt.Client().Close()
	}
}

// TestBadRedisTargets checks that a malformed -redis is refused with a
// message saying what is wanted, and without the password it may hold.
func TestBadRedisTargets(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"redis.example", "not host:port"},
		{"10.0.0.1:7000,10.0.0.2", `"10.0.0.2" is not host:port`},
		{"10.0.0.1:99999", "not host:port"},
		{" , ", "no address"},
		{"http://10.0.0.1:6379", `unknown scheme "http"`},
		{"redis://:hunter2@10.0.0.1:6379?colour=red", "unexpected option"},
		{"redis://:hunter2@10.0.0.1:6379/x", "invalid database"},
		{"redis-sentinel://:hunter2@10.0.0.1:26379", "master_name"},
		{"redis://:hunter2@10.0.0.1:6379?addr=x:1&password=hunter2&colour=red", "unexpected option"},
		{"redis://:hunter2@%zz", "not a valid URL"},
	} {
		_, err := parseRedisTarget(tc.target)
		if err == nil {
			t.Errorf("%s: accepted", tc.target)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v; want an error with %q and no password", tc.target, err, tc.want)
		}
	}
}

// TestEngineFlags checks that flags of the other engine, and redisq's
// options out of bounds, are usage errors.
func TestEngineFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for none
	}{
		{[]string{}, ""},
		{[]string{"-redis", "redis://r:6379"}, ""},
		{[]string{"-redis", "redis://r:6379", "-redis-shards", "64", "-redis-prefix", "billing", "-redis-replicas", "2", "-redis-replica-timeout", "3s"}, ""},
		{[]string{"-redis", "redis://r:6379", "-redis-replicas", "0"}, ""},
		{[]string{"-redis-prefix", "billing"}, "-redis-prefix needs -redis"},
		{[]string{"-redis-shards", "4"}, "-redis-shards needs -redis"},
		{[]string{"-redis", "r:6379", "-data", "/var/lib/tock"}, "-data is for the embedded engine"},
		{[]string{"-redis", "r:6379", "-nosync"}, "-nosync is for the embedded engine"},
		{[]string{"-redis", "r:6379", "-redis-shards", "5000"}, "outside 0 to 1024"},
		{[]string{"-redis", "r:6379", "-redis-replicas", "-2"}, "-redis-replicas -2"},
		{[]string{"-redis", "r:6379", "-redis-replica-timeout", "2s"}, "applies to -redis-replicas 1 or more"},
		{[]string{"-redis", "r:6379", "-redis-replicas", "1", "-redis-replica-timeout", "0s"}, "below 1ms"},
		{[]string{"-redis", "mailto:x"}, "not host:port"},
	} {
		c, err := parseFlags(tc.args, io.Discard)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v; want an error with %q", tc.args, err, tc.want)
		case tc.want == "" && len(tc.args) > 0 && c.redis.target == "":
			t.Errorf("%q: no Redis target", tc.args)
		}
	}
}

// TestRedisFlagDefaults checks that TOCK_REDIS chooses Redis and that the
// replica wait defaults to redisq's.
func TestRedisFlagDefaults(t *testing.T) {
	t.Setenv("TOCK_REDIS", "redis://from-env:6379")
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.redis.target != "redis://from-env:6379" || c.redis.prefix != "tock" || c.redis.shards != 0 ||
		c.redis.replicas != -1 || c.redis.replicaTimeout != time.Second {
		t.Errorf("defaults %+v", c.redis)
	}
}
