package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.25.3", Main: debug.Module{Path: "github.com/tockwheel/tock", Version: "v1.2.0"},
		Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
			{Key: "vcs.revision", Value: "3f2a9c1e5b7d8a9b0c1d2e3f4a5b6c7d8e9f0a1b"}, {Key: "vcs.time", Value: "2026-11-27T09:12:00Z"},
			{Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ld   string
		want string
	}{
		{"recorded", bi, "", "tockd v1.2.0 rev 3f2a9c1e5b7d 2026-11-27T09:12:00Z dirty go1.25.3 linux/arm64"},
		{"recorded beats the linker's", bi, "feedfacefeedface", "tockd v1.2.0 rev 3f2a9c1e5b7d 2026-11-27T09:12:00Z dirty go1.25.3 linux/arm64"},
		{"linker's, dirty", &debug.BuildInfo{GoVersion: "go1.25.3", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"}}},
			"feedfacefeedfacefeed-dirty", "tockd (devel) rev feedfacefeed dirty go1.25.3 linux/amd64"},
		{"nothing", &debug.BuildInfo{GoVersion: "go1.25.3", Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"}}},
			"", "tockd (devel) rev unknown go1.25.3 linux/amd64"},
	} {
		if got := FromBuildInfo(tc.bi, tc.ld).String("tockd"); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
