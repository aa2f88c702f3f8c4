// Package browsertest drives a headless Chromium from Go tests (github.com/chromedp/chromedp):
// it starts the browser that scripts/lib/chromium.sh installs ($OUTBOXKIT_CHROMIUM, see
// testkit.Chromium), opens pages in isolated sessions (each Page has its own cookies), records
// what a user would see go wrong in the DevTools console — JavaScript errors (console.error,
// uncaught exceptions and promise rejections), browser log errors (a Content-Security-Policy
// violation, a resource that failed to load) and failed or refused requests — so that a test can
// require there were none, and saves full-page screenshots as test artefacts.
//
//	b := browsertest.Start(t, nil)
//	p := b.NewPage(t)
//	p.Do(chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main#page")))
//	p.Screenshot("overview")
//	p.RequireNoProblems()
//
// Every action is bounded (Options.Timeout) and a failed action fails the test. Screenshots go
// to $OUTBOXKIT_ARTEFACTS/<test name>/ when that is set, else to a temporary directory of the
// test; the log says where.
package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/outboxkit/outbox/internal/testkit"
)

// ArtefactsEnv names the directory where tests keep their artefacts (screenshots); unset, they
// go to a temporary directory of the test, removed after it.
const ArtefactsEnv = "OUTBOXKIT_ARTEFACTS"

// Defaults of Options.
const (
	DefaultTimeout      = 30 * time.Second
	DefaultStartTimeout = 60 * time.Second
	DefaultWidth        = 1280
	DefaultHeight       = 900
)

// Options tunes Start. The zero value is the default of each field.
type Options struct {
	// Timeout bounds each Do and Run (default DefaultTimeout).
	Timeout time.Duration
	// StartTimeout bounds the start of the browser and the opening of each page (default
	// DefaultStartTimeout).
	StartTimeout time.Duration
	// Width and Height are the window's size in CSS pixels (default DefaultWidth ×
	// DefaultHeight); a full-page screenshot is as tall as the page.
	Width, Height int
}

// Browser is one headless Chromium process of a test; Start stops it when the test ends.
type Browser struct {
	t            testing.TB
	ctx          context.Context // the browser's first tab: its context holds the browser
	timeout      time.Duration
	startTimeout time.Duration
	dirOnce      sync.Once
	dir          string
}

// Start starts headless Chromium ($OUTBOXKIT_CHROMIUM, through testkit.Need: under CI a missing
// browser fails the test) with no sandbox, no GPU and a user-data directory of its own, and stops
// it and removes that directory when the test ends.
func Start(t testing.TB, opts *Options) *Browser {
	t.Helper()
	path := testkit.Need(t, testkit.Chromium)
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.Width <= 0 {
		o.Width = DefaultWidth
	}
	if o.Height <= 0 {
		o.Height = DefaultHeight
	}
	userData, err := os.MkdirTemp("", "outboxkit-chromium-")
	if err != nil {
		t.Fatalf("browsertest: user-data directory: %v", err)
	}
	allocOpts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(userData),
		chromedp.WindowSize(o.Width, o.Height),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), allocOpts...)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc() // waits for the process to end
		_ = os.RemoveAll(userData)
	})
	b := &Browser{t: t, ctx: ctx, timeout: o.Timeout, startTimeout: o.StartTimeout}
	// The first Run starts the browser and ties its life to ctx, so it cannot take a context
	// with a deadline: bound it from outside instead.
	if err := b.bounded(func() error { return chromedp.Do(ctx) }, cancelBrowser); err != nil {
		t.Fatalf("browsertest: starting %s: %v", path, err)
	}
	return b
}

// bounded runs start, which must not get a context with a deadline, and gives up (calling
// cancel, which ends it) after the start timeout.
func (b *Browser) bounded(start func() error, cancel func()) error {
	done := make(chan error, 1)
	go func() { done <- start() }()
	select {
	case err := <-done:
		return err
	case <-time.After(b.startTimeout):
		cancel()
		<-done
		return fmt.Errorf("not started within %s", b.startTimeout)
	}
}

// Problem is one thing that went wrong in a page, as a user would see it in the DevTools console.
type Problem struct {
	// Kind is "console" (console.error or console.assert), "exception" (uncaught, or an
	// unhandled promise rejection), "log" (a browser log error: a CSP violation, a resource that
	// failed to load), "request" (a request that failed or was blocked) or "http" (an answer
	// with status 400 or more). Not a problem: a 404 of /favicon.ico at the root of the origin,
	// the icon the browser asks for by itself when the page declares none (RequireNoProblems
	// logs it).
	Kind string
	Text string
	URL  string
}

func (p Problem) String() string {
	if p.URL == "" {
		return p.Kind + ": " + p.Text
	}
	return p.Kind + ": " + p.Text + " (" + p.URL + ")"
}

// Page is one tab in a browser context of its own (its own cookies and storage: a separate
// session). Use it from the test's goroutine.
type Page struct {
	b   *Browser
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex
	problems []Problem
	probes   []Problem                    // the browser's own favicon probe that failed (not the page's)
	requests map[network.RequestID]string // URL of each request, for LoadingFailed
}

// NewPage opens a tab in a new browser context (so a fresh session: no cookies of another page)
// and records its problems from the start. The page reports to t (the test or subtest using it,
// which may be a subtest of the browser's) and its tab is closed when t ends.
func (b *Browser) NewPage(t testing.TB) *Page {
	t.Helper()
	p := &Page{b: b, t: t, requests: map[network.RequestID]string{}}
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext(), chromedp.WithListener(p.listen))
	t.Cleanup(cancel)
	if err := b.bounded(func() error { return chromedp.Do(ctx) }, cancel); err != nil {
		t.Fatalf("browsertest: opening a page: %v", err)
	}
	p.ctx = ctx
	return p
}

// listen records the problems among the tab's events. It runs on the tab's read loop: it only
// appends under the lock.
func (p *Page) listen(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	add := func(kind, text, url string) {
		p.problems = append(p.problems, Problem{Kind: kind, Text: text, URL: url})
	}
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, remoteText(a))
			}
			url := ""
			if st := ev.StackTrace; st != nil && len(st.CallFrames) > 0 {
				url = st.CallFrames[0].URL
			}
			add("console", strings.Join(parts, " "), url)
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil {
			desc, _, _ := strings.Cut(remoteText(d.Exception), "\n    at ")
			text = strings.TrimSpace(text + " " + desc)
		}
		add("exception", text, d.URL)
	case *log.EventEntryAdded:
		if ev.Entry.Level != log.EntryLevelError {
			return
		}
		pr := Problem{Kind: "log", Text: string(ev.Entry.Source) + ": " + ev.Entry.Text, URL: ev.Entry.URL}
		if ev.Entry.Source == log.EntrySourceNetwork && faviconProbe(pr.URL) {
			p.probes = append(p.probes, pr)
			return
		}
		p.problems = append(p.problems, pr)
	case *network.EventRequestWillBeSent:
		p.requests[ev.RequestID] = ev.Request.URL
	case *network.EventResponseReceived:
		if r := ev.Response; r != nil && r.Status >= 400 {
			pr := Problem{Kind: "http", Text: fmt.Sprintf("%d %s", r.Status, r.StatusText), URL: r.URL}
			if r.Status == http.StatusNotFound && faviconProbe(r.URL) {
				p.probes = append(p.probes, pr)
				return
			}
			p.problems = append(p.problems, pr)
		}
	case *network.EventLoadingFailed:
		// A request the page itself gave up (a navigation away while a refresh was in flight)
		// is not a failure; a blocked one (CSP, mixed content, CORS) is, canceled or not.
		if ev.Canceled && ev.BlockedReason == "" && ev.CorsErrorStatus == nil {
			return
		}
		text := ev.ErrorText
		if ev.BlockedReason != "" {
			text += " (blocked: " + string(ev.BlockedReason) + ")"
		}
		if ev.CorsErrorStatus != nil {
			text += " (CORS: " + string(ev.CorsErrorStatus.CorsError) + ")"
		}
		add("request", text, p.requests[ev.RequestID])
	}
}

// faviconProbe reports whether u is /favicon.ico at the root of its origin: the icon Chromium
// asks for by itself when a page declares none (<link rel="icon">). Its 404 is the browser's
// guess gone wrong, not the page's request: it is not a problem, but RequireNoProblems logs it
// (the page should declare its icon).
func faviconProbe(u string) bool {
	parsed, err := url.Parse(u)
	return err == nil && parsed.Path == "/favicon.ico"
}

// remoteText is a short text of a JavaScript value: a string as it is, else its description.
func remoteText(o *runtime.RemoteObject) string {
	if o == nil {
		return "null"
	}
	if o.Type == runtime.RemoteObjectTypeString {
		var s string
		if err := json.Unmarshal(o.Value, &s); err == nil {
			return s
		}
	}
	if o.Description != "" {
		return o.Description
	}
	if o.UnserializableValue != "" {
		return string(o.UnserializableValue)
	}
	if len(o.Value) > 0 {
		return string(o.Value)
	}
	return string(o.Type)
}

// Context is the page's chromedp context, for actions with a bound of the caller's own (derive
// it with context.WithTimeout).
func (p *Page) Context() context.Context { return p.ctx }

// Do runs the actions in order within Options.Timeout; an error fails the test.
func (p *Page) Do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if _, err := Run(p, chromedp.Steps(actions...)); err != nil {
		p.t.Fatalf("browsertest: %v; problems so far: %v", err, p.Problems())
	}
}

// Run runs one action within Options.Timeout and returns its value and error (a test that
// expects the action to work checks the error; Page.Do fails the test instead).
func Run[T any](p *Page, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.b.timeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// Problems returns what went wrong in the page so far (a copy).
func (p *Page) Problems() []Problem {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.problems)
}

// Probes returns the browser's own /favicon.ico probes that failed (see Problem): not
// problems of the page, kept apart.
func (p *Page) Probes() []Problem {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.probes)
}

// TakeProblems returns what went wrong so far and forgets it: a test that caused a failure on
// purpose (a refused request) checks it and starts afresh.
func (p *Page) TakeProblems() []Problem {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.problems
	p.problems = nil
	return out
}

// RequireNoProblems fails the test, listing them, when anything went wrong in the page. It logs
// a failed favicon probe of the browser (see Problem), which is not one.
func (p *Page) RequireNoProblems() {
	p.t.Helper()
	p.mu.Lock()
	probes := slices.Clone(p.probes)
	p.mu.Unlock()
	if len(probes) > 0 {
		p.t.Logf("browsertest: not counted: the browser's own /favicon.ico probe failed (%v): declare the icon in the pages (<link rel=\"icon\">)", probes[0])
	}
	if got := p.Problems(); len(got) > 0 {
		lines := make([]string, len(got))
		for i, pr := range got {
			lines[i] = "  " + pr.String()
		}
		p.t.Fatalf("browsertest: %d problem(s) in the page:\n%s", len(got), strings.Join(lines, "\n"))
	}
}

// Screenshot saves a full-page PNG screenshot of the page as name.png in the test's artefact
// directory, logs its path and returns it.
func (p *Page) Screenshot(name string) string {
	p.t.Helper()
	png, err := Run(p, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("browsertest: screenshot %s: %v", name, err)
	}
	path := filepath.Join(p.b.artefactDir(p.t), safeName.ReplaceAllString(name, "_")+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatalf("browsertest: screenshot %s: %v", name, err)
	}
	p.t.Logf("browsertest: screenshot %s saved to %s", name, path)
	return path
}

var safeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// ArtefactDir is where the test's screenshots go: $OUTBOXKIT_ARTEFACTS/<test name> (kept), else
// a temporary directory of the test that started the browser (removed after it). It is created
// on first use.
func (b *Browser) ArtefactDir() string {
	b.t.Helper()
	return b.artefactDir(b.t)
}

// artefactDir is ArtefactDir, reporting a failure to t.
func (b *Browser) artefactDir(t testing.TB) string {
	t.Helper()
	b.dirOnce.Do(func() {
		root := os.Getenv(ArtefactsEnv)
		if root == "" {
			b.dir = b.t.TempDir()
			t.Logf("browsertest: artefacts in %s (set $%s to keep them)", b.dir, ArtefactsEnv)
			return
		}
		b.dir = filepath.Join(root, safeName.ReplaceAllString(b.t.Name(), "_"))
		if err := os.MkdirAll(b.dir, 0o755); err != nil {
			t.Fatalf("browsertest: artefacts directory: %v", err)
		}
		t.Logf("browsertest: artefacts in %s", b.dir)
	})
	return b.dir
}
