// Package buildinfo says which build of tock a binary is: its module version, the revision of the
// source it was built from and whether that had uncommitted changes, and the Go toolchain, as the
// toolchain recorded them in the binary (runtime/debug.ReadBuildInfo).
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// revision is the revision of a build made without its repository (a container build, whose
// context leaves .git out, with -buildvcs=false), set with
// -ldflags "-X github.com/tockwheel/tock/internal/buildinfo.revision=REV": a commit hash, with
// "-dirty" after it for a source with uncommitted changes. The toolchain's own record wins when
// there is one.
var revision string

// Info is what a binary records of its build.
type Info struct {
	// Path and Version are the main module's path and version: "v1.2.0" when built by go install
	// module@version, "(devel)" when built from a checkout.
	Path, Version string
	// Revision is the commit the source was at ("" when the build recorded none), Time its time
	// (zero when unknown), and Dirty says the source had uncommitted changes.
	Revision string
	Time     time.Time
	Dirty    bool
	// GoVersion is the toolchain's version ("go1.25.3"); Platform is GOOS/GOARCH.
	GoVersion, Platform string
}

// Read returns the running binary's Info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{GoVersion: runtime.Version()}
	}
	return FromBuildInfo(bi, revision)
}

// FromBuildInfo returns the Info that bi records, with the revision ldRevision ("REV" or
// "REV-dirty") where bi records none.
func FromBuildInfo(bi *debug.BuildInfo, ldRevision string) Info {
	in := Info{Path: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion,
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time, _ = time.Parse(time.RFC3339, s.Value)
		case "vcs.modified":
			in.Dirty = s.Value == "true"
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" && goarch != "" {
		in.Platform = goos + "/" + goarch
	}
	if in.Revision == "" && ldRevision != "" {
		in.Revision, in.Dirty = strings.CutSuffix(ldRevision, "-dirty")
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	return in
}

// String returns in on one line after program's name, as -version prints it:
//
//	tockd (devel) rev 3f2a9c1e5b7d 2026-11-27T09:12:00Z dirty go1.25.3 linux/amd64
//
// with "rev unknown" for a build that recorded no revision.
func (in Info) String(program string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s rev ", program, in.Version)
	if in.Revision == "" {
		b.WriteString("unknown")
	} else {
		b.WriteString(in.Revision[:min(len(in.Revision), 12)])
	}
	if !in.Time.IsZero() {
		b.WriteString(" " + in.Time.UTC().Format(time.RFC3339))
	}
	if in.Dirty {
		b.WriteString(" dirty")
	}
	fmt.Fprintf(&b, " %s %s", in.GoVersion, in.Platform)
	return b.String()
}
