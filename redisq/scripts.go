package redisq

import (
	"context"
	"embed"

	"github.com/redis/go-redis/v9"
)

// The scripts are lua/prelude.lua followed by a script's own file; the files are the reference of
// the protocol (see the package doc). The "#!lua" shebang declares each script's flags, so that
// Redis decides whether it may run over maxmemory before it starts, never at a write halfway
// through (which would leave a message half moved).
//
//go:embed lua/*.lua
var luaFiles embed.FS

func lua(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return string(b)
}

// scriptSources holds the source of every script, for SCRIPT LOAD. (redis.Script.Load must not
// be queued in a pipeline: it records the digest of its reply, which a queued command does not
// have yet.)
var scriptSources []string

func newScript(name, flags string) *redis.Script {
	shebang := "#!lua\n"
	if flags != "" {
		shebang = "#!lua flags=" + flags + "\n"
	}
	src := shebang + lua("prelude") + "\n" + lua(name)
	scriptSources = append(scriptSources, src)
	return redis.NewScript(src)
}

// loadScripts queues SCRIPT LOAD of every script on p.
func loadScripts(ctx context.Context, p redis.Pipeliner) {
	for _, src := range scriptSources {
		p.ScriptLoad(ctx, src)
	}
}

// The scripts that add messages run only below maxmemory (Redis refuses them as a whole above it);
// those that remove or move messages run above it too (allow-oom), so that consumers can drain a
// full Redis and an operator can act on it; those that only read run on any node in any state
// (no-writes).
var (
	putScript        = newScript("put", "")
	reserveScript    = newScript("reserve", "")
	resolveScript    = newScript("resolve", "")
	receiveScript    = newScript("receive", "allow-oom")
	ackScript        = newScript("ack", "allow-oom")
	nackScript       = newScript("nack", "allow-oom")
	extendScript     = newScript("extend", "allow-oom")
	limitScript      = newScript("limit", "allow-oom")
	permitScript     = newScript("permit", "allow-oom")
	cancelScript     = newScript("cancel", "allow-oom")
	tickScript       = newScript("tick", "allow-oom")
	unaliasScript    = newScript("unalias", "allow-oom")
	rehomeScript     = newScript("rehome", "allow-oom")
	deliverNowScript = newScript("delivernow", "allow-oom")
	requeueScript    = newScript("requeue", "allow-oom")
	purgeScript      = newScript("purge", "allow-oom")
	pauseScript      = newScript("pause", "allow-oom")
	scheduleScript   = newScript("schedule", "")
	schedDueScript   = newScript("scheddue", "no-writes")
	statsScript      = newScript("stats", "no-writes")
	dueScript        = newScript("due", "no-writes")
	peekScript       = newScript("peek", "no-writes")
	topicsScript     = newScript("topics", "no-writes")
	listScript       = newScript("list", "no-writes")
	messageScript    = newScript("message", "no-writes")
)
