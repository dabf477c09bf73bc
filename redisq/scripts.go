package redisq

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The scripts run as the functions of one Redis function library (FUNCTION LOAD, FCALL): the
// library is lua/prelude.lua followed by each script's own file, as the body of a function that
// calls the prelude's begin first. The files are the reference of the protocol (see the package
// doc). Redis runs the library's code once, when it loads it: the prelude's 60 functions are made
// then, not on every call, as an EVAL of the prelude and the script made them (24 of the 28 µs of
// Redis's time that a script which does nothing took; see the README).
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

// A script is one function of the library: lua/<file>.lua with its flags, which Redis reads before
// it runs the function, so that it decides whether it may run over maxmemory before it starts,
// never at a write halfway through (which would leave a message half moved).
type script struct {
	file  string
	flags string // register_function's flags, comma-separated
	bare  string // the source of a script that does without the prelude, else ""
	fn    string // the function's name in Redis, set with the library
}

// scripts are the library's functions, in the order of their declarations.
var scripts []*script

func newScript(file, flags string) *script {
	s := &script{file: file, flags: flags}
	scripts = append(scripts, s)
	return s
}

// newBareScript declares a script of the given name and source that does without the prelude:
// the deployment's own, which run before a shard has its stamp. Its body reads KEYS and ARGV as
// an EVAL does.
func newBareScript(name, flags, src string) *script {
	s := &script{file: name, flags: flags, bare: src}
	scripts = append(scripts, s)
	return s
}

// A library is the source of the function library and its name.
type library struct {
	name, source string
}

// libraryMark stands for the library's name in its source until the name is known.
const libraryMark = "@LIBRARY@"

// theLibrary builds the library once, on first use, when every script is declared. Its name is
// "tock_" and the first 16 hexadecimal digits of the SHA-1 of its source, and each function's is
// the library's, "_" and its file's: two versions of redisq on one Redis (a rolling upgrade) load
// and call each its own library, as they ran each its own scripts by their SHA-1 before.
var theLibrary = sync.OnceValue(func() library {
	var b strings.Builder
	b.WriteString("#!lua name=" + libraryMark + "\n")
	b.WriteString(lua("prelude"))
	for _, s := range scripts {
		var flags []string
		for f := range strings.SplitSeq(s.flags, ",") {
			if f != "" {
				flags = append(flags, "'"+f+"'")
			}
		}
		fmt.Fprintf(&b, "\nredis.register_function{function_name = '%s_%s', flags = {%s}, callback = function(",
			libraryMark, s.file, strings.Join(flags, ", "))
		if s.bare != "" {
			fmt.Fprintf(&b, "KEYS, ARGV)\n%s\nend}\n", s.bare)
		} else {
			fmt.Fprintf(&b, "keys, argv)\nlocal refused = begin(keys, argv)\nif refused then return refused end\n%s\nend}\n", lua(s.file))
		}
	}
	sum := sha1.Sum([]byte(b.String()))
	name := "tock_" + hex.EncodeToString(sum[:8])
	for _, s := range scripts {
		s.fn = name + "_" + s.file
	}
	return library{name: name, source: strings.ReplaceAll(b.String(), libraryMark, name)}
})

// function returns the name of the script's function in Redis.
func (s *script) function() string {
	theLibrary()
	return s.fn
}

// call queues or runs the script on c (a client or a pipeline) without loading the library.
func (s *script) call(ctx context.Context, c redis.Cmdable, keys []string, args ...any) *redis.Cmd {
	return c.FCall(ctx, s.function(), keys, args...)
}

// Run runs the script on c, the shard's keys first: FCALL, and when the node has not the library
// (a restarted, promoted or flushed master), FUNCTION LOAD on it and FCALL again.
func (s *script) Run(ctx context.Context, c redis.Cmdable, keys []string, args ...any) *redis.Cmd {
	cmd := s.call(ctx, c, keys, args...)
	if notLoaded(cmd.Err()) && loadLibrary(ctx, c) == nil {
		cmd = s.call(ctx, c, keys, args...)
	}
	return cmd
}

// notLoaded reports whether err is Redis's answer to FCALL of a function it does not have.
func notLoaded(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "Function not found")
}

// loadLibrary loads the library on c, on every master when c is a cluster's client, unless the
// node has it: Redis refuses FUNCTION LOAD above maxmemory, even of a library it has, and a
// process opened on a full Redis must still drain it. (A node without the library cannot be given
// it there.)
func loadLibrary(ctx context.Context, c redis.Cmdable) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return loadLibrary(ctx, m) })
	}
	lib := theLibrary()
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: lib.name}).Result()
	if err != nil {
		return fmt.Errorf("list the function library %s: %w", lib.name, err)
	}
	for _, l := range libs {
		if l.Name == lib.name {
			return nil
		}
	}
	err = c.FunctionLoad(ctx, lib.source).Err()
	if err != nil && redis.HasErrorPrefix(err, "Library '"+lib.name+"' already exists") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load the function library %s: %w", lib.name, err)
	}
	return nil
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
	reclaimScript    = newScript("reclaim", "no-writes")
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
