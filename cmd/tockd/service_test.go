package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// repoRoot is the repository's root, from cmd/tockd.
const repoRoot = "../.."

// TestVersion runs tockd -version: it names tockd, the Go version and the platform; and, built
// with VCS stamping in a git checkout (a clone: the go command does not stamp in a git worktree,
// whose .git is a file), the revision the checkout is at and dirty when it has uncommitted
// changes.
func TestVersion(t *testing.T) {
	out, err := exec.Command(tockdBinary(t), "-version").Output()
	if err != nil {
		t.Fatalf("tockd -version: %v", err)
	}
	got := strings.TrimSpace(string(out))
	if !strings.HasPrefix(got, "tockd ") || !strings.HasSuffix(got, " "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("tockd -version = %q; want tockd's name, %s and the platform", got, runtime.Version())
	}
	if fi, err := os.Stat(filepath.Join(repoRoot, ".git")); err != nil || !fi.IsDir() {
		t.Skip("not a git clone: the go command records no revision")
	}
	head, err := exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("git: %v", err)
	}
	status, err := exec.Command("git", "-C", repoRoot, "status", "--porcelain").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "tockd")
	if b, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, b)
	}
	if out, err = exec.Command(bin, "-version").Output(); err != nil {
		t.Fatal(err)
	}
	got = strings.TrimSpace(string(out))
	if rev := strings.TrimSpace(string(head))[:12]; !strings.Contains(got, " rev "+rev+" ") {
		t.Errorf("tockd -version = %q; want rev %s", got, rev)
	}
	if dirty := len(bytes.TrimSpace(status)) > 0; strings.Contains(got, " dirty ") != dirty {
		t.Errorf("tockd -version = %q; the checkout is dirty: %v", got, dirty)
	}
}

// TestHealthcheck checks tockd -healthcheck against a tockd on loopback and one listening on
// every address (asked on loopback), and that it fails, exit 1 saying why, once tockd is gone.
func TestHealthcheck(t *testing.T) {
	bin := tockdBinary(t)
	for _, listen := range []string{"127.0.0.1:0", "0.0.0.0:0"} {
		d := startTockd(t, t.TempDir(), nil, "-addr", listen)
		addr := strings.TrimPrefix(d.url, "http://")
		if listen == "0.0.0.0:0" {
			_, port, _ := strings.Cut(addr, "]:") // [::]:port
			if port == "" {
				_, port, _ = strings.Cut(addr, ":")
			}
			addr = "0.0.0.0:" + port
		}
		if out, err := exec.Command(bin, "-healthcheck", "-addr", addr).CombinedOutput(); err != nil {
			t.Fatalf("tockd -healthcheck -addr %s: %v\n%s", addr, err, out)
		}
		if err := d.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-d.done
		cmd := exec.Command(bin, "-healthcheck", "-addr", addr)
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "tockd: healthcheck:") {
			t.Errorf("tockd -healthcheck of a stopped tockd: %v, %s; want exit 1 saying why", err, out)
		}
	}
}

// dockerfile returns the Dockerfile's instructions, continuation lines joined.
func dockerfile(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	cont := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if l, ok := strings.CutSuffix(line, "\\"); ok {
			cont += l + " "
			continue
		}
		out = append(out, cont+line)
		cont = ""
	}
	return out
}

// envPairs parses the KEY=value pairs of an ENV instruction, values quoted or not.
func envPairs(t *testing.T, line string) map[string]string {
	t.Helper()
	out := map[string]string{}
	rest := strings.TrimSpace(strings.TrimPrefix(line, "ENV "))
	for rest != "" {
		k, v, ok := strings.Cut(rest, "=")
		if !ok || strings.ContainsAny(k, " \t\"") {
			t.Fatalf("ENV %q: want KEY=value pairs", line)
		}
		if strings.HasPrefix(v, `"`) {
			end := strings.Index(v[1:], `"`)
			if end < 0 {
				t.Fatalf("ENV %q: an unclosed quote", line)
			}
			out[k], rest = v[1:1+end], strings.TrimSpace(v[2+end:])
			continue
		}
		val, after, _ := strings.Cut(v, " ")
		out[k], rest = val, strings.TrimSpace(after)
	}
	return out
}

// TestDockerfileBuild keeps the Dockerfile from rotting where no container engine can build it:
// it runs the build stage's go build as the image would (its exec-form RUN line with the
// stage's ENV, the context's files, no .git, the revision as a build argument), checks that the
// binaries are static (the final stage is scratch: no dynamic loader, no libc) and that tockd says
// the revision given; and checks what the final stage promises: a user that is not root, the
// data directory a volume and tockd's default, a health check tockd answers itself, and an
// entrypoint it copied. .ci/container builds and runs the image where podman can.
func TestDockerfileBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tockd; skipped with -short")
	}
	var build []string
	env := map[string]string{}
	stages := 0
	var final []string
	for _, l := range dockerfile(t) {
		if strings.HasPrefix(l, "FROM ") {
			stages++
			final = nil
		}
		final = append(final, l)
		if stages == 1 && strings.HasPrefix(l, "ENV ") {
			for k, v := range envPairs(t, l) {
				env[k] = v
			}
		}
		if cmd, ok := strings.CutPrefix(l, "RUN "); ok && strings.Contains(cmd, `"build"`) {
			if err := json.Unmarshal([]byte(cmd), &build); err != nil {
				t.Fatalf("the go build line %q is not exec form: %v", l, err)
			}
		}
	}
	if stages < 2 || len(build) < 2 || build[0] != "go" || final[0] != "FROM scratch" {
		t.Fatalf("Dockerfile: %d stages, go build line %q, final stage %q; want a build stage with go build and a final one from scratch", stages, build, final[0])
	}
	if env["CGO_ENABLED"] != "0" {
		t.Errorf("the build stage sets CGO_ENABLED=%q; want 0, for a static binary", env["CGO_ENABLED"])
	}
	out := t.TempDir()
	const rev = "0123456789abcdef0123456789abcdef01234567-dirty"
	args := make([]string, len(build)-1)
	for i, a := range build[1:] {
		args[i] = strings.ReplaceAll(a, "/out/", out+"/")
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Dir = repoRoot
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+strings.ReplaceAll(v, "${TOCK_REVISION}", rev))
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's go build %q: %v\n%s", args, err, b)
	}
	for _, name := range []string{"tockd", "tock"} {
		f, err := elf.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s is not static: it has a %v program header", name, p.Type)
			}
		}
		f.Close()
	}
	v, err := exec.Command(filepath.Join(out, "tockd"), "-version").Output()
	if err != nil || !strings.Contains(string(v), " rev 0123456789ab dirty ") {
		t.Errorf("the image's tockd -version = %q, %v; want rev 0123456789ab dirty", v, err)
	}
	v, err = exec.Command(filepath.Join(out, "tock"), "version").Output()
	if err != nil || !strings.Contains(string(v), " rev 0123456789ab dirty ") {
		t.Errorf("the image's tock version = %q, %v; want rev 0123456789ab dirty", v, err)
	}

	stage := strings.Join(final, "\n")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^USER [1-9][0-9]*:[1-9][0-9]*$`),
		regexp.MustCompile(`(?m)^VOLUME /data$`),
		regexp.MustCompile(`(?m)^ENV .*TOCK_DATA=/data`),
		regexp.MustCompile(`(?m)^COPY --from=build /out/tockd /out/tock /usr/local/bin/$`),
		regexp.MustCompile(`(?m)^HEALTHCHECK .*CMD \["/usr/local/bin/tockd", "-healthcheck"\]$`),
		regexp.MustCompile(`(?m)^ENTRYPOINT \["/usr/local/bin/tockd"\]$`),
	} {
		if !want.MatchString(stage) {
			t.Errorf("the Dockerfile's final stage lacks %s:\n%s", want, stage)
		}
	}
}

// TestSystemdUnit checks deploy/systemd/tockd.service with systemd-analyze verify, tockd's path
// in it replaced by the built one: any complaint (an unknown key is only a warning) fails.
func TestSystemdUnit(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze")
	}
	bin := tockdBinary(t)
	unit, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "systemd", "tockd.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("ExecStart=/usr/local/bin/tockd ")) {
		t.Fatalf("the unit does not start /usr/local/bin/tockd:\n%s", unit)
	}
	path := filepath.Join(t.TempDir(), "tockd.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/tockd"), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
