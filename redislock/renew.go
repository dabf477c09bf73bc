package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// renewBatchSize bounds the keys renewed by one script call. A call over 256 keys keeps Redis busy
// for well under a millisecond, and 10,000 held locks cost 40 calls per period, sent as one
// pipeline per master.
const renewBatchSize = 256

// An outcome is what a renewal round learnt of one entry.
type outcome int

const (
	notRenewed outcome = iota // no answer, an error, or no replica acknowledged it: retried
	renewed                   // the lease was extended (and a replica has it, where there are replicas)
	gone                      // the key is gone or held by another acquisition: the lock is lost
)

// nodeState is what the watchdog knows of one master.
type nodeState struct {
	loaded   bool // renewNodeSrc is in the master's script cache, as far as known
	known    bool // replicas was learnt from the master
	replicas int  // replicas connected and in sync at the master's last reply
}

// noteReplicas records how many replicas node had in sync at its last reply, so that the next
// acquisition or round there waits for one of them.
func (d *watchdog) noteReplicas(node *redis.Client, replicas int) {
	d.nodes.Lock()
	defer d.nodes.Unlock()
	addr := node.Options().Addr
	st := d.nodes.m[addr]
	st.known, st.replicas = true, replicas
	d.nodes.m[addr] = st
}

// replicasOf returns how many replicas node had in sync at its last reply, asking it (INFO) if it
// never replied.
func (d *watchdog) replicasOf(ctx context.Context, node *redis.Client) (int, error) {
	if st := d.node(node.Options().Addr); st.known {
		return st.replicas, nil
	}
	info, err := node.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	n := strings.Count(info, "state=online")
	d.noteReplicas(node, n)
	return n, nil
}

func (d *watchdog) node(addr string) nodeState {
	d.nodes.Lock()
	defer d.nodes.Unlock()
	return d.nodes.m[addr]
}

func (d *watchdog) setNode(addr string, st nodeState) {
	d.nodes.Lock()
	defer d.nodes.Unlock()
	d.nodes.m[addr] = st
}

// renew renews the leases of es once and reports an outcome per entry, and the first error met.
//
// The locks held on one master are renewed with one renewNodeSrc call per renewBatchSize keys, all
// in one pipeline on one connection, followed by a WAIT for a replica where the master has
// replicas: so a Redis Cluster costs as many calls per period as one server does, not one per hash
// slot. A master's first call of a Locker sends the script's source (EVAL), which caches it, so
// no round sends each call twice. Keys that a master no longer serves (a slot migrated, a failover
// the Locker has not learnt of) are renewed through the client, one renewSrc call per slot, which
// follows redirections. A Ring, whose shards cannot be addressed, and a Redis older than 7.0, which
// refuses the script, are renewed that way too.
func (d *watchdog) renew(ctx context.Context, es []*entry) ([]outcome, error) {
	out := make([]outcome, len(es))
	all := make([]int, len(es))
	for i := range all {
		all[i] = i
	}
	switch d.l.rdb.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		// A Ring, or a client of a kind the Locker cannot address masters through.
		return out, d.renewPerSlot(ctx, es, all, out)
	}
	if d.perSlot.Load() {
		return out, d.renewPerSlot(ctx, es, all, out)
	}
	var (
		mu        sync.Mutex // guards firstErr and elsewhere; each node writes its own entries of out
		firstErr  error
		elsewhere []int
		groups    = make(map[*redis.Client][]int)
	)
	for i, e := range es {
		node, err := d.l.nodeFor(ctx, e.key)
		if err != nil {
			firstErr = cmp(firstErr, err)
			continue
		}
		groups[node] = append(groups[node], i)
	}
	var wg sync.WaitGroup
	for node, idx := range groups {
		wg.Go(func() {
			moved, err := d.renewOnNode(ctx, node, es, idx, out)
			mu.Lock()
			defer mu.Unlock()
			elsewhere = append(elsewhere, moved...)
			firstErr = cmp(firstErr, err)
		})
	}
	wg.Wait()
	if errors.Is(firstErr, errNoCrossSlot) {
		d.perSlot.Store(true)
		clear(out)
		return out, d.renewPerSlot(ctx, es, all, out)
	}
	if len(elsewhere) > 0 {
		if cc, ok := d.l.rdb.(*redis.ClusterClient); ok {
			cc.ReloadState(ctx)
		}
		firstErr = cmp(firstErr, d.renewPerSlot(ctx, es, elsewhere, out))
	}
	return out, firstErr
}

// cmp returns the first error of the two that is not nil.
func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// errNoCrossSlot reports that a master refused renewNodeSrc as a script it cannot compile, as Redis
// before 7.0 does with a script that declares flags.
var errNoCrossSlot = errors.New("redislock: Redis refuses scripts with flags (before 7.0)")

// renewOnNode renews the entries idx of es held on node and sets their outcomes. It returns the
// entries that node does not serve.
func (d *watchdog) renewOnNode(ctx context.Context, node *redis.Client, es []*entry, idx []int, out []outcome) ([]int, error) {
	addr := node.Options().Addr
	st := d.node(addr)
	var batches [][]int
	for rest := idx; len(rest) > 0; {
		n := min(len(rest), renewBatchSize)
		batches = append(batches, rest[:n:n])
		rest = rest[n:]
	}
	argv := make([][]any, len(batches))
	for b, batch := range batches {
		argv[b] = d.nodeArgs(es, batch)
	}
	waitFor := min(d.l.replicaWait, d.period/2)
	wait := st.replicas > 0 && waitFor > 0
	cmds, acked := d.sendToNode(ctx, node, argv, !st.loaded, wait, waitFor)
	if st.loaded && anyNoScript(cmds) {
		// The master forgot the script (a restart, or a replica promoted that never ran it).
		cmds, acked = d.sendToNode(ctx, node, argv, true, wait, waitFor)
	}
	var firstErr error
	var moved []int
	replicas := -1
	for b, cmd := range cmds {
		v, err := cmd.Result()
		if err == nil {
			var results []int
			results, replicas, err = parseRenewNode(v, len(batches[b]))
			for j, i := range batches[b] {
				if err != nil {
					break
				}
				switch results[j] {
				case renewedKey:
					out[i] = renewed
				case goneKey:
					out[i] = gone
				case elsewhereKey:
					moved = append(moved, i)
				}
			}
		}
		if err != nil && strings.Contains(err.Error(), "compiling script") {
			return nil, fmt.Errorf("%w: %w", errNoCrossSlot, err)
		}
		firstErr = cmp(firstErr, err)
	}
	if replicas < 0 {
		return moved, firstErr // no batch was answered
	}
	d.setNode(addr, nodeState{loaded: true, known: true, replicas: replicas})
	if replicas > 0 {
		// Count a renewal only once a replica has it: a failover would otherwise leave the new
		// master with a shorter lease than the holder counts on.
		var n int64
		var err error = fmt.Errorf("%w: the master had not been seen with replicas before", ErrNotReplicated)
		if acked != nil {
			n, err = acked.Int64()
			if err == nil && n == 0 {
				err = fmt.Errorf("%w: none of %d acknowledged the renewal within %v", ErrNotReplicated, replicas, waitFor)
			}
		}
		if err != nil || n == 0 {
			for _, i := range idx {
				if out[i] == renewed {
					out[i] = notRenewed
				}
			}
			firstErr = cmp(firstErr, err)
		}
	}
	return moved, firstErr
}

// sendToNode sends one renewNodeSrc call per batch, as EVAL with the source or EVALSHA with its
// hash, and with wait a WAIT for one replica, in one pipeline on node.
func (d *watchdog) sendToNode(ctx context.Context, node *redis.Client, argv [][]any, eval, wait bool, waitFor time.Duration) ([]*redis.Cmd, *redis.Cmd) {
	cmds := make([]*redis.Cmd, len(argv))
	var acked *redis.Cmd
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		for b, args := range argv {
			if eval {
				cmds[b] = renewNodeScript.Eval(ctx, p, nil, args...)
			} else {
				cmds[b] = renewNodeScript.EvalSha(ctx, p, nil, args...)
			}
		}
		if wait {
			// The client's ReadTimeout, not waitFor, bounds a pipeline's reads: it must be longer.
			acked = p.Do(ctx, "WAIT", 1, waitFor.Milliseconds())
		}
		return nil
	})
	return cmds, acked
}

// nodeArgs returns the ARGV of a renewNodeSrc call for the entries batch of es.
func (d *watchdog) nodeArgs(es []*entry, batch []int) []any {
	argv := make([]any, 1, 1+3*len(batch))
	argv[0] = millis(d.l.timeout)
	for _, i := range batch {
		argv = append(argv, es[i].key, es[i].tokenArg, es[i].owner)
	}
	return argv
}

func anyNoScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if isNoScript(c.Err()) {
			return true
		}
	}
	return false
}

// renewPerSlot renews the entries idx of es through the Locker's client with one renewSrc call per
// batch of keys of one group (a cluster slot, or a Ring's hash tag), and sets their outcomes. The
// client routes each call and follows redirections; there is no WAIT, as the client cannot say
// which connection a call took.
func (d *watchdog) renewPerSlot(ctx context.Context, es []*entry, idx []int, out []outcome) error {
	sub := make([]*entry, len(idx))
	for j, i := range idx {
		sub[j] = es[i]
	}
	batches := d.batch(sub)
	pos := make(map[*entry]int, len(idx))
	for _, i := range idx {
		pos[es[i]] = i
	}
	renewedKeys, errs := d.renewBatches(ctx, batches)
	var firstErr error
	for b, batch := range batches {
		if errs[b] != nil {
			firstErr = cmp(firstErr, errs[b])
			continue
		}
		for j, e := range batch {
			if renewedKeys[b][j] {
				out[pos[e]] = renewed
			} else {
				out[pos[e]] = gone
			}
		}
	}
	return firstErr
}

// batch groups entries into renewSrc calls: only keys of one group (one cluster slot) may share a
// call, and a call takes at most renewBatchSize keys.
func (d *watchdog) batch(es []*entry) [][]*entry {
	groups := make(map[string][]*entry)
	var order []string
	for _, e := range es {
		g := d.l.group(e.key)
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], e)
	}
	var batches [][]*entry
	for _, g := range order {
		list := groups[g]
		for len(list) > 0 {
			n := min(len(list), renewBatchSize)
			batches = append(batches, list[:n:n])
			list = list[n:]
		}
	}
	return batches
}

// renewBatches sends one renewSrc call per batch, all in one pipeline, and reports per batch which
// keys were renewed or why the call failed.
func (d *watchdog) renewBatches(ctx context.Context, batches [][]*entry) ([][]bool, []error) {
	cmds := make([]*redis.Cmd, len(batches))
	args := d.args(batches)
	send := func(idx []int, eval bool) {
		_, _ = d.l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				if eval {
					cmds[i] = renewScript.Eval(ctx, p, args[i].keys, args[i].argv...)
				} else {
					cmds[i] = renewScript.EvalSha(ctx, p, args[i].keys, args[i].argv...)
				}
			}
			return nil
		})
	}
	all := make([]int, len(batches))
	for i := range all {
		all[i] = i
	}
	send(all, false)
	// After a Redis restart or SCRIPT FLUSH the script is unknown: send the source once, which
	// also caches it again.
	var again []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		send(again, true)
	}
	renewedKeys := make([][]bool, len(batches))
	errs := make([]error, len(batches))
	for i, c := range cmds {
		v, err := c.Result()
		if err == nil {
			renewedKeys[i], err = parseRenew(v, len(batches[i]))
		}
		errs[i] = err
	}
	return renewedKeys, errs
}

type batchArgs struct {
	keys []string
	argv []any
}

func (d *watchdog) args(batches [][]*entry) []batchArgs {
	ms := millis(d.l.timeout)
	out := make([]batchArgs, len(batches))
	for i, b := range batches {
		keys := make([]string, len(b))
		argv := make([]any, 1+2*len(b))
		argv[0] = ms
		for j, e := range b {
			keys[j] = e.key
			argv[1+2*j], argv[2+2*j] = e.tokenArg, e.owner
		}
		out[i] = batchArgs{keys, argv}
	}
	return out
}
