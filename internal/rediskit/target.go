package rediskit

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterReload is how often the cluster clients of ParseTarget reload the cluster's state while
// in use, so that a failover is noticed within seconds rather than go-redis's default minute
// (see package redisq's doc).
const ClusterReload = 2 * time.Second

// A Target is a Redis deployment named as tockd's -redis flag names it: the options of one of
// go-redis's clients.
type Target struct {
	Kind     string // "server", "cluster" or "sentinel"
	Server   *redis.Options
	Cluster  *redis.ClusterOptions
	Sentinel *redis.FailoverOptions
}

// Client returns a client of the deployment. It dials nothing until used.
func (t Target) Client() redis.UniversalClient {
	switch {
	case t.Cluster != nil:
		return redis.NewClusterClient(t.Cluster)
	case t.Sentinel != nil:
		return redis.NewFailoverClient(t.Sentinel)
	}
	return redis.NewClient(t.Server)
}

// ParseTarget parses a deployment's name:
//
//   - redis://, rediss:// or unix:// URL: one server (go-redis's ParseURL); with addr= query
//     parameters, a Cluster whose seed nodes are the URL's host and those (ParseClusterURL).
//   - redis-sentinel:// or rediss-sentinel:// URL: the master named by its master_name parameter,
//     found through the Sentinels at its host and its addr= parameters (ParseFailoverURL; the
//     URL's user and password are the Sentinels', a password= parameter the master's).
//   - host:port[,host:port...]: a Cluster, seeded with those nodes.
//
// Cluster clients reload the cluster's state every ClusterReload while in use. Errors say what is
// wanted, and never hold the password the target may have.
func ParseTarget(target string) (Target, error) {
	target = strings.TrimSpace(target)
	scheme, rest, isURL := strings.Cut(target, "://")
	if !isURL {
		addrs, err := clusterAddrs(target)
		if err != nil {
			return Target{}, err
		}
		return Target{Kind: "cluster", Cluster: &redis.ClusterOptions{Addrs: addrs, ClusterStateReloadInterval: ClusterReload}}, nil
	}
	bad := func(err error) error {
		// go-redis's parse errors can quote the URL, password included.
		msg := strings.ReplaceAll(err.Error(), target, Redact(target))
		return fmt.Errorf("%s: %s", Redact(target), msg)
	}
	switch scheme {
	case "redis-sentinel", "rediss-sentinel":
		opt, err := redis.ParseFailoverURL(strings.TrimSuffix(scheme, "-sentinel") + "://" + rest)
		if err != nil {
			return Target{}, bad(err)
		}
		if opt.MasterName == "" {
			return Target{}, bad(errors.New("name the master with ?master_name=NAME"))
		}
		return Target{Kind: "sentinel", Sentinel: opt}, nil
	case "redis", "rediss", "unix":
		u, err := url.Parse(target)
		if err != nil {
			return Target{}, bad(err)
		}
		if scheme != "unix" && u.Query().Has("addr") {
			opt, err := redis.ParseClusterURL(target)
			if err != nil {
				return Target{}, bad(err)
			}
			if opt.ClusterStateReloadInterval == 0 {
				opt.ClusterStateReloadInterval = ClusterReload
			}
			return Target{Kind: "cluster", Cluster: opt}, nil
		}
		opt, err := redis.ParseURL(target)
		if err != nil {
			return Target{}, bad(err)
		}
		return Target{Kind: "server", Server: opt}, nil
	}
	return Target{}, fmt.Errorf("%s: unknown scheme %q; want redis://, rediss://, unix://, redis-sentinel://, rediss-sentinel:// or host:port addresses of a Cluster",
		Redact(target), scheme)
}

// clusterAddrs parses comma-separated host:port addresses.
func clusterAddrs(list string) ([]string, error) {
	var addrs []string
	for a := range strings.SplitSeq(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%q is not host:port; give a redis:// URL for one server, or host:port addresses of a Cluster separated by commas", a)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, errors.New("no address given")
	}
	return addrs, nil
}

// Redact returns target, for logs and messages, with any password in it replaced by xxxxx.
func Redact(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		// Unparsable: it may hold a password anywhere.
		if scheme, _, ok := strings.Cut(target, "://"); ok {
			return scheme + "://(not a valid URL)"
		}
		return target
	}
	if u.Scheme == "" || u.Host == "" {
		return target
	}
	q := u.Query()
	for _, k := range []string{"password", "sentinel_password"} {
		if q.Has(k) {
			q.Set(k, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.Redacted()
}
