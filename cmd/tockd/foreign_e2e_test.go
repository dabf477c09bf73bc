package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/client"
)

// foreignClient is the client in another language that knows no path of tockd's but the
// document's: api/clients/tock.mjs, run by Node.
const foreignClient = "../../api/clients/tock.mjs"

// nodeFor returns the path of Node, skipping the test where there is none (.ci/run installs it).
func nodeFor(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (.ci/run installs Debian's nodejs): the client in another language cannot run")
	}
	return node
}

// TestForeignClientFromTheDocument runs the JavaScript client against a real tockd with a token:
// it loads /openapi.json, finds the operations by operationId, and puts, receives, extends and
// acks a message. The message must then be done: not leased, not due again, not cancellable.
func TestForeignClientFromTheDocument(t *testing.T) {
	node := nodeFor(t)
	const token = "a-token-for-the-node-client"
	d := startTockd(t, t.TempDir(), []string{"TOCK_TOKEN=" + token})

	cmd := exec.Command(node, foreignClient, d.url, "from-node")
	cmd.Env = append(os.Environ(), "TOCK_TOKEN="+token)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\nstdout:\n%s\nstderr:\n%s", foreignClient, err, out, stderr.Bytes())
	}
	type step struct {
		Step   string          `json:"step"`
		Status int             `json:"status"`
		Body   json.RawMessage `json:"body"`
	}
	var steps []step
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var s step
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("node printed %q, not a step: %v", sc.Text(), err)
		}
		steps = append(steps, s)
	}
	want := []struct {
		step   string
		status int
	}{{"put", 201}, {"receive", 200}, {"extend", 204}, {"ack", 204}, {"cancel", 404}}
	if len(steps) != len(want) {
		t.Fatalf("node made %d steps, want %d:\n%s", len(steps), len(want), out)
	}
	for i, w := range want {
		if steps[i].Step != w.step || steps[i].Status != w.status {
			t.Errorf("step %d: %s %d, want %s %d", i, steps[i].Step, steps[i].Status, w.step, w.status)
		}
	}
	var put struct{ ID string }
	var got struct {
		Messages []struct {
			ID      string
			Payload struct{ From string }
			Attempt int
		}
	}
	if err := json.Unmarshal(steps[0].Body, &put); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(steps[1].Body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Messages) != 1 || got.Messages[0].ID != put.ID || got.Messages[0].Payload.From != "node" || got.Messages[0].Attempt != 1 {
		t.Fatalf("node put %s and received %s", steps[0].Body, steps[1].Body)
	}

	// The ack is kept: nothing is leased, nothing due, and no receive brings the message back.
	ctx := ctxFor(t, 30*time.Second)
	c := d.client(t, client.WithToken(token))
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leased != 0 || st.Due != 0 || st.Scheduled != 0 {
		t.Errorf("after node's ack: %d scheduled, %d due, %d leased; want none", st.Scheduled, st.Due, st.Leased)
	}

	// Without the token, the client is refused as the document's auth says, at its first call
	// after the document itself (which needs none).
	cmd = exec.Command(node, foreignClient, d.url, "from-node")
	cmd.Env = append(os.Environ(), "TOCK_TOKEN=")
	msg, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "put: 401 unauthorized") {
		t.Errorf("node without the token: %v, %q; want a 401 unauthorized on its put", err, msg)
	}
}

// TestForeignClientKnowsNoPath checks that the JavaScript client spells no route of tockd's but
// the document's own: it finds every other through /openapi.json.
func TestForeignClientKnowsNoPath(t *testing.T) {
	src, err := os.ReadFile(foreignClient)
	if err != nil {
		t.Fatal(err)
	}
	code := regexp.MustCompile(`(?m)^\s*//.*$`).ReplaceAll(src, nil) // its comments show how to call it
	if m := regexp.MustCompile(`['"\x60]/(v1|healthz|readyz|metrics)\b[^'"\x60]*`).Find(code); m != nil {
		t.Errorf("%s spells the path %s; it must find paths in /openapi.json", foreignClient, m)
	}
}
