package gui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// The GUI in a real browser: Debian's chromium, headless, driven over the DevTools
// protocol (chromedp), against the real control plane of env_test.go.

const chromiumPath = "/usr/bin/chromium"

// browser is one chromium tab and what it reported: console errors, uncaught exceptions,
// failed requests and error answers.
type browser struct {
	t        *testing.T
	ctx      context.Context
	mu       sync.Mutex
	problems []string
	shots    string // the screenshots' directory
}

// newBrowser starts chromium with the project's flags and a fresh profile; it skips the
// test when chromium is not installed.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("%s is not installed (apt-get install chromium; scripts/test-deps.sh installs it): %v", chromiumPath, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, shots: screenshotDir(t)}
	if err := chromedp.Do(ctx); err != nil {
		t.Skipf("chromium cannot run here: %v", err)
	}
	if err := chromedp.Listen(ctx, b.record); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		call(ctx, runtime.Enable, cdp.Empty{}), call(ctx, cdplog.Enable, cdp.Empty{}), call(ctx, network.Enable, network.EnableParams{}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func call[P, R any](ctx context.Context, cmd cdp.Command[P, R], p P) error {
	_, err := chromedp.Call(ctx, cmd, p)
	return err
}

// record keeps what a page must not do.
func (b *browser) record(ev any) {
	var p string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			p = "console." + string(ev.Type) + ": " + strings.Join(args, " ")
		}
	case *runtime.EventExceptionThrown:
		p = "exception: " + ev.ExceptionDetails.Text
		if ev.ExceptionDetails.Exception != nil {
			p += " " + ev.ExceptionDetails.Exception.Description
		}
	case *cdplog.EventEntryAdded:
		if ev.Entry.Level == cdplog.EntryLevelError {
			p = "log: " + ev.Entry.Text + " " + ev.Entry.URL
		}
	case *network.EventLoadingFailed:
		// a page left closes its event stream: canceled, not failed
		if !ev.Canceled {
			p = "request failed: " + ev.ErrorText + " (" + string(ev.Type) + ")"
		}
	case *network.EventResponseReceived:
		if ev.Response.Status >= 400 {
			p = fmt.Sprintf("answer %d: %s", ev.Response.Status, ev.Response.URL)
		}
	}
	if p != "" {
		b.mu.Lock()
		b.problems = append(b.problems, p)
		b.mu.Unlock()
	}
}

// clean fails the test with what the browser reported since the last call.
func (b *browser) clean(what string) {
	b.t.Helper()
	b.mu.Lock()
	ps := b.problems
	b.problems = nil
	b.mu.Unlock()
	if len(ps) > 0 {
		b.t.Errorf("%s: the browser reported:\n  %s", what, strings.Join(ps, "\n  "))
	}
}

// open navigates to url and waits until the page follows the control plane's events.
func (b *browser) open(url string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("open %s: %v", url, err)
	}
	testutil.WaitFor(b.t, "the page's event stream open ("+url+")", 10*time.Second, func() bool {
		return eval[bool](b, `document.body.getAttribute('data-live') === 'yes'`)
	})
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// screenshotDir is where the screenshots go: $KUMA_GUI_SCREENSHOTS, else a new temporary
// directory kept after the test (its path is printed), to be looked at.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("KUMA_GUI_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d, err := os.MkdirTemp("", "kuma-gui-screenshots-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// screenshot writes the whole page (name.png) and what the window shows (name-view.png) as
// PNG into the screenshots' directory.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	eval[bool](b, `window.scrollTo(0, 0), true`)
	for file, shot := range map[string]chromedp.Action[[]byte]{name: chromedp.FullScreenshot(100), name + "-view": chromedp.CaptureScreenshot()} {
		png, err := chromedp.Run(b.ctx, shot)
		if err != nil {
			b.t.Fatalf("screenshot %s: %v", file, err)
		}
		path := filepath.Join(b.shots, file+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			b.t.Fatal(err)
		}
		b.t.Logf("screenshot: %s", path)
	}
}

// accessible checks what a page must give a keyboard and a screen reader: every form field
// labelled, every image named, the first Tab on the skip link, text contrast of at least
// 4.5:1 (WCAG AA), and at a phone's width nothing wider than the screen but the scrolling
// regions.
func (b *browser) accessible(page string) {
	b.t.Helper()
	if bad := eval[[]string](b, `Array.from(document.querySelectorAll('input, select, textarea')).filter(e => e.labels.length === 0).map(e => e.outerHTML)`); len(bad) > 0 {
		b.t.Errorf("%s: form fields without a label: %v", page, bad)
	}
	if bad := eval[[]string](b, `Array.from(document.querySelectorAll('svg[role=img]')).filter(e => !e.getAttribute('aria-labelledby') && !e.getAttribute('aria-label')).map(e => e.id)`); len(bad) > 0 {
		b.t.Errorf("%s: pictures without a name: %v", page, bad)
	}
	if bad := eval[[]string](b, contrastJS); len(bad) > 0 {
		b.t.Errorf("%s: text below 4.5:1 contrast: %v", page, bad)
	}
	if err := chromedp.Do(b.ctx, chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)`), chromedp.KeyEvent("\t")); err != nil {
		b.t.Fatal(err)
	}
	if got := eval[string](b, `document.activeElement.textContent`); got != "Skip to content" {
		b.t.Errorf("%s: the first Tab focuses %q, want the skip link", page, got)
	}
	eval[bool](b, `document.activeElement.blur(), true`)
}

// contrastJS lists the elements whose own text has a contrast under 4.5:1 against the
// first opaque background behind it.
const contrastJS = `(() => {
  const rgb = s => (s.match(/[\d.]+/g) || []).map(Number);
  const lum = c => { const [r, g, b] = c.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const bg = el => { for (let e = el; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor); if (c.length === 3 || c[3] > 0.5) return c; } return [255, 255, 255]; };
  const bad = [];
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('svg') || !Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim())) continue;
    const st = getComputedStyle(el);
    if (st.visibility === 'hidden' || st.display === 'none' || el.getClientRects().length === 0) continue;
    const a = lum(rgb(st.color)), b = lum(bg(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) bad.push(el.tagName + ' "' + el.textContent.trim().slice(0, 30) + '" ' + ratio.toFixed(2));
  }
  return bad;
})()`

// phone checks a page at a phone's width (390 x 844): nothing but the scrolling regions
// wider than the screen. It screenshots it and goes back to 1280 x 800.
func (b *browser) phone(page string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)); err != nil {
		b.t.Fatal(err)
	}
	wide := eval[[]string](b, `Array.from(document.querySelectorAll('body *')).filter(e => !e.closest('.scroll') && e.checkVisibility() && e.getBoundingClientRect().right > document.documentElement.clientWidth + 2).map(e => e.tagName + '.' + e.className + ' (right ' + e.getBoundingClientRect().right.toFixed(1) + ' of ' + document.documentElement.clientWidth + ', in ' + e.parentElement.tagName + ' right ' + e.parentElement.getBoundingClientRect().right.toFixed(1) + ')')`)
	if len(wide) > 0 {
		b.t.Errorf("%s at a phone's width: wider than the screen: %v", page, wide)
	}
	b.screenshot(page + "-phone")
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		b.t.Fatal(err)
	}
}

// vipsEntry is what the test compares of `kuma-dp vips -o json` with the page's table.
type vipsEntry struct {
	Hostname, IPv4, IPv6 string
	Ports                []uint32
	Origin               struct{ Kind, Name string }
	Status               string
}

func (e vipsEntry) row() string {
	ports := make([]string, len(e.Ports))
	for i, p := range e.Ports {
		ports[i] = fmt.Sprint(p)
	}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	return strings.Join([]string{e.Hostname, dash(e.IPv4), dash(e.IPv6), strings.Join(ports, ","), e.Origin.Kind + "/" + e.Origin.Name, e.Status}, " | ")
}

// kumaDPVips runs `kuma-dp vips -o json` on files.
func kumaDPVips(t *testing.T, bin, dataplaneFile, dir string) []vipsEntry {
	t.Helper()
	out, err := exec.Command(bin, "vips", "--dataplane-file", dataplaneFile, "--policies-dir", dir, "-o", "json").Output()
	if err != nil {
		t.Fatalf("kuma-dp vips: %v", err)
	}
	var doc struct{ Entries []vipsEntry }
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Entries
}

// chromedpClick clicks the element sel finds.
func chromedpClick(b *browser, sel string) error {
	return chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(sel)))
}
