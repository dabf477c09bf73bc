package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
)

// The browser tests of the package share one headless Chromium: starting one takes a second or two
// on a quiet machine and more than ten on a loaded one, and each test would start its own. Each
// test gets a tab in a browser context of its own (as an incognito window: no cookies, cache or
// credentials shared with the others), closed when the test ends.

// chrome is the shared browser, started by the first test that needs it and stopped by TestMain.
var chrome struct {
	once sync.Once
	ctx  context.Context // the browser's context; its tabs are made from it
	stop func()
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if chrome.stop != nil {
		chrome.stop()
	}
	if code == 0 && !checkExercised() {
		code = 1
	}
	os.Exit(code)
}

// chromium returns the path of a Chromium or Chrome binary. Outside CI a
// test without one is skipped; in CI (CI set) it fails, so a CI image that
// lost the package cannot pass silently.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed; CI must install the Debian package chromium")
	}
	t.Skip("chromium is not installed (Debian package chromium)")
	return ""
}

// newTab opens a tab of width by height pixels in the shared browser, in a browser context of its
// own, and closes it when the test ends. It skips or fails t as chromium does when there is no
// browser.
func newTab(t *testing.T, width, height int) context.Context {
	t.Helper()
	bin := chromium(t)
	chrome.once.Do(func() { chrome.ctx, chrome.stop, chrome.err = startChromium(bin) })
	if chrome.err != nil {
		t.Fatalf("starting chromium: %v", chrome.err)
	}
	ctx, cancel := chromedp.NewContext(chrome.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(height))); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	return ctx
}

// startChromium starts the browser at bin and returns its context and the function that stops it.
func startChromium(bin string) (context.Context, func(), error) {
	dir, err := os.MkdirTemp("", "tock-chromium-")
	if err != nil {
		return nil, nil, err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(dir),
		chromedp.Flag("hide-scrollbars", true), chromedp.Flag("disable-quic", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	stop := func() {
		cancel()
		cancelAlloc()
		os.RemoveAll(dir)
	}
	if err := chromedp.Do(ctx); err != nil {
		stop()
		return nil, nil, fmt.Errorf("%s: %w", bin, err)
	}
	return ctx, stop, nil
}
