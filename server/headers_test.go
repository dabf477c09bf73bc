package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// TestHeadersBoundsAgree checks that the API's bounds of headers are the contract's.
func TestHeadersBoundsAgree(t *testing.T) {
	if api.MaxHeaders != queue.MaxHeaders || api.MaxHeaderKey != queue.MaxHeaderKey || api.MaxHeadersSize != queue.MaxHeadersSize {
		t.Fatalf("api's header bounds %d, %d, %d; queue's %d, %d, %d", api.MaxHeaders, api.MaxHeaderKey, api.MaxHeadersSize,
			queue.MaxHeaders, queue.MaxHeaderKey, queue.MaxHeadersSize)
	}
}

// TestHeadersOverHTTP puts messages with headers over HTTP, gets them in the delivery and the
// message's view, and checks the answers to headers the server refuses: each names the field.
func TestHeadersOverHTTP(t *testing.T) {
	ts, _ := newTestServer(t, WithLimits(Limits{MaxPayload: 1000}))
	r := call(t, ts, "POST", api.PutPath("t"), `{"id":"m","payload":{"a":1},"delay":"1h","headers":{"traceparent":"00-x","k":"<&>"}}`)
	if r.status != 201 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	var m api.MessageInfo
	call(t, ts, "GET", api.MessagePath("m"), "").json(t, &m)
	if len(m.Headers) != 2 || m.Headers["k"] != "<&>" || m.Headers["traceparent"] != "00-x" {
		t.Fatalf("message view has headers %q", m.Headers)
	}
	if r := call(t, ts, "POST", api.DeliverPath("m"), ""); r.status != 200 {
		t.Fatalf("deliver now: %d %s", r.status, r.body)
	}
	var got api.ReceiveResponse
	call(t, ts, "POST", api.ReceivePath("t"), `{"wait":"5s"}`).json(t, &got)
	if len(got.Messages) != 1 || got.Messages[0].Headers["k"] != "<&>" {
		t.Fatalf("delivery: %+v", got.Messages)
	}
	// A message without headers has no "headers" field at all.
	call(t, ts, "POST", api.PutPath("t"), `{"id":"plain"}`)
	r = call(t, ts, "POST", api.ReceivePath("t"), `{"wait":"5s"}`)
	if !strings.Contains(string(r.body), `"id":"plain"`) || strings.Contains(string(r.body), "headers") {
		t.Fatalf("delivery of a message without headers: %s", r.body)
	}

	many := make([]string, api.MaxHeaders+1)
	for i := range many {
		many[i] = fmt.Sprintf(`"k%d":""`, i)
	}
	for _, tc := range []struct {
		body   string
		status int
		code   string
		says   string
	}{
		{`{"headers":{"a b":"v"}}`, 400, api.CodeBadRequest, `field "headers": header key "a b"`},
		{`{"headers":{"":"v"}}`, 400, api.CodeBadRequest, `field "headers": header key of 0 bytes`},
		{`{"headers":{"k":"line\nbreak"}}`, 400, api.CodeBadRequest, `header "k": the value holds a control character`},
		{`{"headers":{"k":1}}`, 400, api.CodeBadRequest, `field "headers" must be an object of strings, not one holding a JSON number`},
		{`{"headers":["k"]}`, 400, api.CodeBadRequest, `field "headers" must be an object`},
		{`{"headers":{` + strings.Join(many, ",") + `}}`, 413, api.CodeTooLarge, "65 headers, over 64"},
		{`{"headers":{"k":"` + strings.Repeat("v", 990) + `"},"payload":"` + strings.Repeat("p", 10) + `"}`, 413, api.CodeTooLarge,
			"payload and headers are 1003 bytes"},
	} {
		r := call(t, ts, "POST", api.PutPath("t"), tc.body)
		if r.status != tc.status || r.errorCode(t) != tc.code || !strings.Contains(r.errorMsg(t), tc.says) {
			t.Errorf("put %.80s: %d %s; want %d %s saying %q", tc.body, r.status, r.body, tc.status, tc.code, tc.says)
		}
		r = call(t, ts, "POST", api.BatchPath("t"), `{"messages":[{},`+tc.body+`]}`)
		if r.status != tc.status || !strings.Contains(r.errorMsg(t), "messages[1]") && !strings.Contains(r.errorMsg(t), "messages.headers") {
			t.Errorf("batch with %.80s: %d %s; want %d naming messages[1]", tc.body, r.status, r.body, tc.status)
		}
	}
}
