package main

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestTracingFromTheEnvironment checks when tockd traces: only with an OTLP endpoint in the
// environment, not when the SDK is disabled or the exporter is none, and never with a protocol or
// exporter it does not speak (an error, not silence).
func TestTracingFromTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		env   map[string]string
		trace bool
		err   string
	}{
		{env: nil},
		{env: map[string]string{"OTEL_SERVICE_NAME": "x"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, trace: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, trace: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, err: "only with otlp"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: "use http/protobuf"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, trace: true},
	} {
		tp, stop, err := tracing(context.Background(), func(k string) string { return tc.env[k] })
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: %v; want an error saying %q", tc.env, err, tc.err)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.env, err)
		case (tp != nil) != tc.trace || (stop != nil) != tc.trace:
			t.Errorf("%v: provider %v; want one: %v", tc.env, tp, tc.trace)
		}
		if stop != nil {
			stop(context.Background())
		}
	}
}

// TestTockdExportsSpans starts tockd with OTEL_EXPORTER_OTLP_ENDPOINT naming a collector of this
// test (OTLP over HTTP, decoded with the protocol's own messages), puts a message with the Go
// client in a trace, and stops tockd: the collector receives the server span of the put, named by
// its route, in the caller's trace, from service "tockd".
func TestTockdExportsSpans(t *testing.T) {
	var mu sync.Mutex
	var spans []*tracepb.Span
	var services []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || err != nil || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					services = append(services, kv.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Write(b)
	}))
	defer collector.Close()

	d := startTockd(t, t.TempDir(), []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_BSP_SCHEDULE_DELAY=50"})
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, err := http.NewRequest("POST", d.url+"/v1/topics/jobs/messages", strings.NewReader(`{"payload":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("put: %d", resp.StatusCode)
	}
	if _, err := d.client(t).Stats(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.exitCode(t, time.Minute); code != 0 {
		t.Fatalf("tockd exited %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	var put *tracepb.Span
	names := []string{}
	for _, s := range spans {
		names = append(names, s.Name)
		if s.Name == "POST /v1/topics/{topic}/messages" {
			put = s
		}
	}
	if put == nil {
		t.Fatalf("the collector received spans %q; want the put's", names)
	}
	if got := hex.EncodeToString(put.TraceId); got != traceID || hex.EncodeToString(put.ParentSpanId) != parentID || put.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("the put's span: trace %s, parent %s, kind %v; want the request's trace %s under %s, a server span",
			got, hex.EncodeToString(put.ParentSpanId), put.Kind, traceID, parentID)
	}
	if len(services) == 0 || services[0] != "tockd" {
		t.Fatalf("service names %q; want tockd", services)
	}
}
