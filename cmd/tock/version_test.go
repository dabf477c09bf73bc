package main

import (
	"context"
	"runtime"
	"strings"
	"testing"
)

// TestVersionCommand checks tock version: the name, the Go version and the platform on one line,
// and a usage error for an argument.
func TestVersionCommand(t *testing.T) {
	var out, errb strings.Builder
	if code := versionCommand(context.Background(), nil, &out, &errb); code != 0 || errb.Len() > 0 {
		t.Fatalf("tock version: exit %d, %s", code, errb.String())
	}
	if got := strings.TrimSpace(out.String()); !strings.HasPrefix(got, "tock ") || !strings.Contains(got, " rev ") ||
		!strings.HasSuffix(got, " "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH) || strings.Contains(got, "\n") {
		t.Errorf("tock version = %q", got)
	}
	if code := versionCommand(context.Background(), []string{"extra"}, &out, &errb); code != exitUsage {
		t.Errorf("tock version extra: exit %d, want %d", code, exitUsage)
	}
}
