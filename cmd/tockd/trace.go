package main

import (
	"context"
	"fmt"

	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracing returns the provider of tockd's spans of its requests when the standard OpenTelemetry
// environment names an OTLP endpoint (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT), and the function that flushes and stops it; nil and nil
// otherwise, and when OTEL_SDK_DISABLED is true or OTEL_TRACES_EXPORTER is "none". The exporter
// speaks OTLP over HTTP (http/protobuf) and reads the rest of the OTEL_EXPORTER_OTLP_*
// variables itself (headers, timeout, compression, certificates); the SDK reads the sampler
// (OTEL_TRACES_SAMPLER, by default parent-based, always on) and the batching (OTEL_BSP_*); the
// resource is service.name "tockd", or OTEL_SERVICE_NAME, with OTEL_RESOURCE_ATTRIBUTES.
func tracing(ctx context.Context, getenv func(string) string) (trace.TracerProvider, func(context.Context) error, error) {
	if getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return nil, nil, nil
	}
	if disabled, _ := strconv.ParseBool(getenv("OTEL_SDK_DISABLED")); disabled {
		return nil, nil, nil
	}
	switch e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e {
	case "", "otlp":
	case "none":
		return nil, nil, nil
	default:
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: tockd exports spans only with otlp (or none)", e)
	}
	for _, key := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(key); p != "" {
			if p != "http/protobuf" {
				return nil, nil, fmt.Errorf("%s=%q: tockd exports spans over OTLP/HTTP only: use http/protobuf", key, p)
			}
			break
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// The environment's attributes (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) come last, so
	// that they win over tockd's default name.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "tockd")),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
