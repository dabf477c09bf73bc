package redisq

import (
	"context"
	"embed"

	"github.com/redis/go-redis/v9"
)

// The scripts are lua/prelude.lua followed by a script's own file; the files are the reference of
// the protocol (see the package doc). The "#!lua" shebang makes Redis refuse a writing script as a
// whole when it is out of memory, rather than failing it at its first write after others.
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

func newScript(name string, readOnly bool) *redis.Script {
	shebang := "#!lua\n"
	if readOnly {
		shebang = "#!lua flags=no-writes\n"
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

var (
	putScript     = newScript("put", false)
	receiveScript = newScript("receive", false)
	ackScript     = newScript("ack", false)
	nackScript    = newScript("nack", false)
	cancelScript  = newScript("cancel", false)
	tickScript    = newScript("tick", false)
	reserveScript = newScript("reserve", false)
	resolveScript = newScript("resolve", false)
	unaliasScript = newScript("unalias", false)
	statsScript   = newScript("stats", true)
	dueScript     = newScript("due", true)
	peekScript    = newScript("peek", true)
)
