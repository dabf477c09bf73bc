package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SlotCount is the number of hash slots of a Redis Cluster.
const SlotCount = 16384

// DefaultNodeTimeout is the cluster-node-timeout of the nodes that StartCluster starts unless
// ClusterConfig says otherwise: Redis's own default. A node that a loaded machine keeps from
// answering the others for longer is taken for failed, and its slots stop being served until a
// replica takes over (CLUSTERDOWN meanwhile); a test that fails no node must not see that, so
// only tests that fail nodes on purpose ask for [FailoverNodeTimeout].
const DefaultNodeTimeout = 15 * time.Second

// FailoverNodeTimeout is the cluster-node-timeout for tests that kill or pause nodes and wait for
// the cluster to fail them over: a failover then takes a second or two instead of the fifteen or
// more of Redis's default. On a loaded machine a node can miss it without having failed, so such
// a test must accept a failover it did not cause.
const FailoverNodeTimeout = 500 * time.Millisecond

// clusterTimeout bounds every wait for the cluster to settle. A healthy cluster of loopback nodes
// needs about two seconds to form (Redis keeps a new master unwritable for two seconds after it
// starts) and one or two to fail over, so reaching it means something is wrong.
const clusterTimeout = 30 * time.Second

// pollInterval is how often the waits ask the nodes again: Redis offers no notification of a
// change of the cluster's state.
const pollInterval = 20 * time.Millisecond

// ClusterConfig describes the cluster that StartCluster starts. The zero value is three masters
// without replicas.
type ClusterConfig struct {
	// Masters is the number of masters, which share the 16384 hash slots in contiguous ranges of
	// nearly equal size, the first master holding the lowest slots. Zero means 3.
	Masters int

	// Replicas is the number of replicas of each master.
	Replicas int

	// NodeTimeout is every node's cluster-node-timeout: how long a node may be unreachable before
	// the others take it for failed and a replica of a failed master takes over. Zero means
	// DefaultNodeTimeout.
	NodeTimeout time.Duration

	// AppendOnly turns on the append-only file with appendfsync always, so that a node restarted
	// with Restart keeps every write it acknowledged. Without it a restarted node comes back empty
	// (and a restarted master that was failed over resynchronizes from its successor).
	AppendOnly bool

	// Args are more redis-server arguments for every node, after those StartCluster sets.
	Args []string
}

// A Cluster is a Redis Cluster of redis-server processes owned by a test, all on loopback. Nodes
// fail over as a production cluster does: every node is a cluster-enabled redis-server, replicas
// replicate through the ordinary replication stream, and failure detection and elections run on
// the cluster bus (quickly with [FailoverNodeTimeout]).
//
// The methods that describe the cluster (Masters, MasterOfSlot, ...) report the view of the first
// running node that answers; after a change (a kill, a failover, a migration) call WaitHealthy or
// WaitPromoted first, so that every node shares that view. A Cluster is safe for concurrent use,
// but the methods that wait fail the test on timeout and so must run on the test's goroutine.
type Cluster struct {
	t     testing.TB
	cfg   ClusterConfig
	nodes []*Node // in start order: the masters, then the replicas of each master in turn
}

// A Node is one redis-server of a Cluster. Its Server methods crash (Stop), freeze (Pause),
// resume and restart it; a restarted node keeps its node ID and rejoins the cluster.
type Node struct {
	*Server

	// ID is the node's cluster node ID, which survives Restart.
	ID string

	admin *redis.Client // for the helper's own commands; closed when the test ends
}

// StartCluster starts a Redis Cluster as cfg describes, on free loopback ports, and returns once it
// is healthy (see WaitHealthy): every slot is served, every node agrees on who serves it, and every
// replica has caught up with its master. It takes about two seconds, most of it the delay Redis
// imposes before a new master accepts writes. Every node is killed when the test ends. Like Start,
// it returns nil only after calling t.Skip, when redis-server is missing outside CI.
//
// Each node runs in a temporary directory of its own with cluster-enabled yes, the node timeout of
// cfg, diskless replication without delay (so a replica is in sync within milliseconds), replica
// validity checks off (so any replica may take over however long it was disconnected), and replica
// migration off (so replicas stay where they were put).
func StartCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	bin, ok := binary(t)
	if !ok {
		return nil
	}
	if cfg.Masters == 0 {
		cfg.Masters = 3
	}
	if cfg.Masters < 0 || cfg.Masters > SlotCount || cfg.Replicas < 0 {
		t.Fatalf("redistest: invalid cluster of %d masters with %d replicas each", cfg.Masters, cfg.Replicas)
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = DefaultNodeTimeout
	}
	args := []string{
		"--cluster-node-timeout", strconv.FormatInt(cfg.NodeTimeout.Milliseconds(), 10),
		"--cluster-replica-validity-factor", "0",
		"--cluster-allow-replica-migration", "no",
		"--repl-diskless-sync", "yes",
		"--repl-diskless-sync-delay", "0",
	}
	if cfg.AppendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	}
	args = append(args, cfg.Args...)

	c := &Cluster{t: t, cfg: cfg, nodes: make([]*Node, cfg.Masters*(1+cfg.Replicas))}
	// Start every process at once: each needs some milliseconds, and the two seconds a master
	// waits before it accepts writes run from its start.
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Go(func() {
			s, err := startServer(t, bin, true, args)
			if err != nil {
				errs[i] = err
				return
			}
			c.nodes[i] = &Node{Server: s, admin: adminClient(t, s.Addr)}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("redistest: start a cluster node: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	for _, n := range c.nodes {
		id, err := n.admin.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("redistest: CLUSTER MYID of %s: %v", n.Addr, err)
		}
		n.ID = id
	}
	for i, m := range c.nodes[:cfg.Masters] {
		first, last := i*SlotCount/cfg.Masters, (i+1)*SlotCount/cfg.Masters-1
		if err := m.admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			t.Fatalf("redistest: assign slots %d-%d to %s: %v", first, last, m.Addr, err)
		}
	}
	for _, n := range c.nodes[1:] {
		if err := c.nodes[0].admin.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.port, n.busPort).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER MEET %s: %v", n.Addr, err)
		}
	}
	// A replica can follow only a master it knows, so let the handshakes finish first.
	c.waitFor("every node to know every other", func(ctx context.Context) error {
		for _, n := range c.nodes {
			view, err := nodesView(ctx, n)
			if err != nil {
				return err
			}
			if len(view) != len(c.nodes) {
				return fmt.Errorf("%s knows %d of %d nodes", n.Addr, len(view), len(c.nodes))
			}
			for _, v := range view {
				if v.flags["handshake"] || v.flags["noaddr"] {
					return fmt.Errorf("%s: node %s is in %v", n.Addr, v.addr, v.flags)
				}
			}
		}
		return nil
	})
	for i, m := range c.nodes[:cfg.Masters] {
		for j := range cfg.Replicas {
			r := c.nodes[cfg.Masters+i*cfg.Replicas+j]
			if err := r.admin.Do(ctx, "CLUSTER", "REPLICATE", m.ID).Err(); err != nil {
				t.Fatalf("redistest: make %s a replica of %s: %v", r.Addr, m.Addr, err)
			}
		}
	}
	c.WaitHealthy()
	return c
}

// adminClient returns the client the helper uses for its own commands to one node. Its timeouts are
// short so that a node that is paused or gone makes a wait retry rather than hang.
func adminClient(t testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr:        addr,
		DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second,
		MaxRetries:  -1,
		PoolSize:    2,
	})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// Nodes returns every node, in start order: the masters, then the replicas of the first master,
// of the second, and so on. Roles change with failovers; see Masters and ReplicasOf for the current
// ones.
func (c *Cluster) Nodes() []*Node { return slices.Clone(c.nodes) }

// Addrs returns the address of every node, for the Addrs of a redis.ClusterOptions.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Node returns the node listening on addr, failing the test if there is none.
func (c *Cluster) Node(addr string) *Node {
	c.t.Helper()
	for _, n := range c.nodes {
		if n.Addr == addr {
			return n
		}
	}
	c.t.Fatalf("redistest: no cluster node at %s", addr)
	return nil
}

// Kill crashes the node at addr with SIGKILL (kill -9); see Server.Stop.
func (c *Cluster) Kill(addr string) { c.t.Helper(); c.Node(addr).Stop() }

// Pause freezes the node at addr with SIGSTOP; see Server.Pause.
func (c *Cluster) Pause(addr string) { c.t.Helper(); c.Node(addr).Pause() }

// Resume lets the paused node at addr run again; see Server.Resume.
func (c *Cluster) Resume(addr string) { c.t.Helper(); c.Node(addr).Resume() }

// Restart starts the node at addr again (killing it first if it runs). It rejoins the cluster
// with its node ID; a master that was failed over meanwhile comes back as a replica of its
// successor. Call WaitHealthy to wait until it has.
func (c *Cluster) Restart(addr string) { c.t.Helper(); c.Node(addr).Restart() }

// Masters returns the masters that serve slots, ordered by their lowest slot.
func (c *Cluster) Masters() []*Node {
	c.t.Helper()
	view := c.view()
	var ms []*Node
	var lows []int
	for _, v := range view {
		if v.flags["master"] && len(v.slots) > 0 {
			ms = append(ms, c.Node(v.addr))
			lows = append(lows, v.slots[0][0])
		}
	}
	idx := make([]int, len(ms))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return lows[a] - lows[b] })
	out := make([]*Node, len(ms))
	for i, j := range idx {
		out[i] = ms[j]
	}
	return out
}

// ReplicasOf returns the replicas of master m, running or not.
func (c *Cluster) ReplicasOf(m *Node) []*Node {
	c.t.Helper()
	var rs []*Node
	for _, v := range c.view() {
		if v.master == m.ID {
			rs = append(rs, c.Node(v.addr))
		}
	}
	return rs
}

// MasterOfSlot returns the master that serves slot.
func (c *Cluster) MasterOfSlot(slot int) *Node {
	c.t.Helper()
	for _, v := range c.view() {
		if v.flags["master"] && v.serves(slot) {
			return c.Node(v.addr)
		}
	}
	c.t.Fatalf("redistest: no master serves slot %d", slot)
	return nil
}

// MasterOfKey returns the master that serves key's slot.
func (c *Cluster) MasterOfKey(key string) *Node {
	c.t.Helper()
	return c.MasterOfSlot(c.KeySlot(key))
}

// KeySlot returns the hash slot of key, as Redis computes it (CLUSTER KEYSLOT).
func (c *Cluster) KeySlot(key string) int {
	c.t.Helper()
	n := c.anyRunning()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	slot, err := n.admin.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		c.t.Fatalf("redistest: CLUSTER KEYSLOT %q on %s: %v", key, n.Addr, err)
	}
	return int(slot)
}

// WaitHealthy waits until the running nodes (those neither stopped nor paused) form a healthy
// cluster: each reports cluster_state:ok with all 16384 slots assigned, all of them agree on which
// master serves each slot and that master is running, and each running replica is connected to
// its master and has processed everything the master had written when asked. It fails the test
// if that does not happen within half a minute.
func (c *Cluster) WaitHealthy() {
	c.t.Helper()
	c.waitFor("a healthy cluster", c.healthy)
}

// WaitPromoted waits until the slots that master old served (it is typically killed or paused by
// now) are served by another node, as after one of its replicas won an election, and the cluster
// is healthy again; it returns the new master.
func (c *Cluster) WaitPromoted(old *Node) *Node {
	c.t.Helper()
	var slots [][2]int
	for _, v := range c.view() {
		if v.id == old.ID {
			slots = v.slots
		}
	}
	if len(slots) == 0 {
		c.t.Fatalf("redistest: %s serves no slots", old.Addr)
	}
	var promoted *Node
	c.waitFor("a replica of "+old.Addr+" to take over", func(ctx context.Context) error {
		n, err := c.runningView(ctx)
		if err != nil {
			return err
		}
		for _, v := range n {
			if v.id != old.ID && v.flags["master"] && v.serves(slots[0][0]) {
				if err := c.healthy(ctx); err != nil {
					return err
				}
				promoted = c.Node(v.addr)
				return nil
			}
		}
		return fmt.Errorf("slot %d is still served by %s", slots[0][0], old.Addr)
	})
	return promoted
}

// Failover makes the replica at addr take over from its master with CLUSTER FAILOVER, the
// coordinated switch an operator starts (the master stops writes until the replica has caught up,
// so nothing is lost), and waits until the cluster is healthy with the replica as master.
func (c *Cluster) Failover(addr string) {
	c.t.Helper()
	r := c.Node(addr)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := r.admin.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		c.t.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", addr, err)
	}
	c.waitFor(addr+" to become a master", func(ctx context.Context) error {
		role, err := r.admin.Do(ctx, "ROLE").Slice()
		if err != nil {
			return err
		}
		if len(role) == 0 || role[0] != "master" {
			return fmt.Errorf("%s is still a %v", addr, role)
		}
		return c.healthy(ctx)
	})
}

// A SlotMigration moves one hash slot, with its keys, from the master that serves it to another, in
// the steps of Redis Cluster's resharding, so that a test can run clients between them and meet
// MOVED and ASK redirections. Start one with StartMigration.
type SlotMigration struct {
	c        *Cluster
	slot     int
	from, to *Node
}

// StartMigration begins moving slot to master to: to imports it and its current master migrates
// it. Until Finish, the slot's keys that are still on the old master are served there, and any
// other key of the slot gets an ASK redirection to the new one (which serves it only to clients
// that send ASKING first).
func (c *Cluster) StartMigration(slot int, to *Node) *SlotMigration {
	c.t.Helper()
	from := c.MasterOfSlot(slot)
	if from == to {
		c.t.Fatalf("redistest: slot %d is already served by %s", slot, to.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := to.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.ID).Err(); err != nil {
		c.t.Fatalf("redistest: import slot %d on %s: %v", slot, to.Addr, err)
	}
	if err := from.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", to.ID).Err(); err != nil {
		c.t.Fatalf("redistest: migrate slot %d on %s: %v", slot, from.Addr, err)
	}
	return &SlotMigration{c: c, slot: slot, from: from, to: to}
}

// MoveKeys moves the given keys of the slot to the new master (MIGRATE), or with no keys every key
// the old master still holds in the slot.
func (m *SlotMigration) MoveKeys(keys ...string) {
	m.c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	for {
		batch := keys
		if len(keys) == 0 {
			var err error
			batch, err = m.from.admin.ClusterGetKeysInSlot(ctx, m.slot, 100).Result()
			if err != nil {
				m.c.t.Fatalf("redistest: keys of slot %d on %s: %v", m.slot, m.from.Addr, err)
			}
			if len(batch) == 0 {
				return
			}
		}
		args := []any{"MIGRATE", "127.0.0.1", m.to.port, "", 0, 5000, "KEYS"}
		for _, k := range batch {
			args = append(args, k)
		}
		if err := m.from.admin.Do(ctx, args...).Err(); err != nil && err.Error() != "NOKEY" {
			m.c.t.Fatalf("redistest: MIGRATE %d keys of slot %d to %s: %v", len(batch), m.slot, m.to.Addr, err)
		}
		if len(keys) > 0 {
			return
		}
	}
}

// Finish moves the keys left in the slot, assigns the slot to the new master on every master, and
// waits until the cluster is healthy with the new assignment, after which clients that still send
// the slot's commands to the old master get MOVED.
func (m *SlotMigration) Finish() {
	m.c.t.Helper()
	m.MoveKeys()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	// The new master's claim must outrank the old one's: a node yields a slot to another that
	// claims it with a greater config epoch, and gossip from the old master sent before it was
	// told can reach the new one after. Seen once at load 24: after the SETSLOTs the new master,
	// at config epoch 1, no longer served the slot, and in its view the old one, at epoch 2, did,
	// while the others saw the new master serve it; the cluster never agreed. BUMPEPOCH first
	// gives the new master the greatest epoch.
	if err := m.to.admin.Do(ctx, "CLUSTER", "BUMPEPOCH").Err(); err != nil {
		m.c.t.Fatalf("redistest: bump the config epoch of %s: %v", m.to.Addr, err)
	}
	// The importing side first, so that the slot is never without an owner that accepts it.
	owners := []*Node{m.to, m.from}
	for _, n := range m.c.Masters() {
		if n != m.to && n != m.from {
			owners = append(owners, n)
		}
	}
	for _, n := range owners {
		if err := n.admin.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.to.ID).Err(); err != nil {
			m.c.t.Fatalf("redistest: assign slot %d to %s on %s: %v", m.slot, m.to.Addr, n.Addr, err)
		}
	}
	m.c.waitFor(fmt.Sprintf("every node to see slot %d on %s", m.slot, m.to.Addr), func(ctx context.Context) error {
		view, err := m.c.runningView(ctx)
		if err != nil {
			return err
		}
		for _, v := range view {
			if v.flags["master"] && v.serves(m.slot) && v.id != m.to.ID {
				return fmt.Errorf("slot %d still on %s", m.slot, v.addr)
			}
		}
		return m.c.healthy(ctx)
	})
}

// MigrateSlot moves slot and its keys to master to, as StartMigration and Finish do together.
func (c *Cluster) MigrateSlot(slot int, to *Node) {
	c.t.Helper()
	c.StartMigration(slot, to).Finish()
}

// nodeInfo is one line of CLUSTER NODES.
type nodeInfo struct {
	id     string
	addr   string
	flags  map[string]bool // myself, master, slave, fail?, fail, handshake, noaddr, ...
	master string          // the node ID of its master, for a replica
	slots  [][2]int        // the slot ranges it serves, first to last inclusive
}

func (v nodeInfo) serves(slot int) bool {
	for _, r := range v.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// nodesView returns what n reports of the cluster (CLUSTER NODES).
func nodesView(ctx context.Context, n *Node) ([]nodeInfo, error) {
	text, err := n.admin.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", n.Addr, err)
	}
	var out []nodeInfo
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES on %s: malformed line %q", n.Addr, line)
		}
		v := nodeInfo{id: f[0], flags: make(map[string]bool)}
		v.addr, _, _ = strings.Cut(f[1], "@")
		if strings.HasPrefix(v.addr, ":") {
			// A node that has met no other does not know its own IP yet.
			v.addr = "127.0.0.1" + v.addr
		}
		for _, fl := range strings.Split(f[2], ",") {
			v.flags[fl] = true
		}
		if f[3] != "-" {
			v.master = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue // a slot being imported or migrated, still served by its owner
			}
			lo, hi, found := strings.Cut(s, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if found {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("CLUSTER NODES on %s: malformed slots %q", n.Addr, s)
			}
			v.slots = append(v.slots, [2]int{a, b})
		}
		out = append(out, v)
	}
	return out, nil
}

// running returns the nodes that are neither stopped nor paused.
func (c *Cluster) running() []*Node {
	var out []*Node
	for _, n := range c.nodes {
		if n.Running() && !n.Paused() {
			out = append(out, n)
		}
	}
	return out
}

func (c *Cluster) anyRunning() *Node {
	c.t.Helper()
	rs := c.running()
	if len(rs) == 0 {
		c.t.Fatal("redistest: no cluster node is running")
	}
	return rs[0]
}

// runningView returns the view of the first running node that answers.
func (c *Cluster) runningView(ctx context.Context) ([]nodeInfo, error) {
	var firstErr error
	for _, n := range c.running() {
		v, err := nodesView(ctx, n)
		if err == nil {
			return v, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("no cluster node is running")
	}
	return nil, firstErr
}

// view is runningView for the methods that fail the test.
func (c *Cluster) view() []nodeInfo {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	v, err := c.runningView(ctx)
	if err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
	return v
}

// healthy returns nil if the running nodes form a healthy cluster (see WaitHealthy), and otherwise
// what is not yet so.
func (c *Cluster) healthy(ctx context.Context) error {
	nodes := c.running()
	if len(nodes) == 0 {
		return fmt.Errorf("no cluster node is running")
	}
	var want string
	for _, n := range nodes {
		info, err := n.admin.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", n.Addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return fmt.Errorf("%s reports %s", n.Addr, strings.Join(strings.Fields(info)[:4], " "))
		}
		view, err := nodesView(ctx, n)
		if err != nil {
			return err
		}
		got := c.topology(view)
		if want == "" {
			want = got
		} else if got != want {
			return fmt.Errorf("%s sees %s, %s sees %s", nodes[0].Addr, want, n.Addr, got)
		}
		for _, v := range view {
			if !v.flags["myself"] {
				continue
			}
			if v.flags["master"] {
				for _, o := range view {
					if o.flags["master"] && len(o.slots) > 0 && !c.Node(o.addr).Running() {
						return fmt.Errorf("slots of %s, which is down, are not taken over", o.addr)
					}
				}
			}
			if v.flags["slave"] {
				if err := c.replicaInSync(ctx, n, v.master, view); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// topology describes which master serves which slots in view, and whom each running node
// replicates, to compare views.
func (c *Cluster) topology(view []nodeInfo) string {
	addrs := make(map[string]string, len(view))
	for _, v := range view {
		addrs[v.id] = v.addr
	}
	var parts []string
	for _, v := range view {
		if v.flags["master"] {
			for _, r := range v.slots {
				parts = append(parts, fmt.Sprintf("slots %d-%d on %s", r[0], r[1], v.addr))
			}
		}
		if n := c.Node(v.addr); n.Running() && !n.Paused() {
			if v.flags["slave"] {
				parts = append(parts, fmt.Sprintf("%s replicates %s", v.addr, addrs[v.master]))
			} else {
				parts = append(parts, fmt.Sprintf("%s is a master", v.addr))
			}
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// replicaInSync returns nil if replica r is connected to its master (ID masterID) and has
// processed everything the master had written before it was asked.
func (c *Cluster) replicaInSync(ctx context.Context, r *Node, masterID string, view []nodeInfo) error {
	var m *Node
	for _, v := range view {
		if v.id == masterID {
			m = c.Node(v.addr)
		}
	}
	if m == nil || !m.Running() || m.Paused() {
		return nil // nothing to be in sync with; the slots check covers a master that is down
	}
	minfo, err := m.admin.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("INFO replication on %s: %w", m.Addr, err)
	}
	rinfo, err := r.admin.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("INFO replication on %s: %w", r.Addr, err)
	}
	if infoField(rinfo, "master_link_status") != "up" || infoField(rinfo, "master_sync_in_progress") != "0" {
		return fmt.Errorf("replica %s is not connected to %s yet", r.Addr, m.Addr)
	}
	want, err1 := strconv.ParseInt(infoField(minfo, "master_repl_offset"), 10, 64)
	got, err2 := strconv.ParseInt(infoField(rinfo, "slave_repl_offset"), 10, 64)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("replication offsets of %s and %s: %v, %v", m.Addr, r.Addr, err1, err2)
	}
	if got < want {
		return fmt.Errorf("replica %s at offset %d, its master %s at %d", r.Addr, got, m.Addr, want)
	}
	return nil
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// waitFor calls check until it returns nil, and fails the test if that takes clusterTimeout.
func (c *Cluster) waitFor(what string, check func(ctx context.Context) error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	for {
		// One slow check (a node that stops answering) must not use up the whole wait.
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		err := check(cctx)
		ccancel()
		if err == nil {
			return
		}
		select {
		case <-time.After(pollInterval):
		case <-ctx.Done():
			c.t.Fatalf("redistest: waited %v for %s: %v\n%s", clusterTimeout, what, err, c.describe())
		}
	}
}

// describe returns what each running node reports of the cluster, for a failure message.
func (c *Cluster) describe() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "node %s (running %v, paused %v):\n", n.Addr, n.Running(), n.Paused())
		if !n.Running() || n.Paused() {
			continue
		}
		text, err := n.admin.ClusterNodes(ctx).Result()
		if err != nil {
			fmt.Fprintf(&b, "  %v\n", err)
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
			fmt.Fprintf(&b, "  %s\n", line)
		}
	}
	return b.String()
}
