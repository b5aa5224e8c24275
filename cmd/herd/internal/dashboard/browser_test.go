package dashboard

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/herdkit/herd/cmd/herd/internal/herdtest"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/masterelection"
)

// The environment of the browser test.
const (
	// envRequireBrowser=1 fails the browser test when no Chromium is found,
	// instead of skipping it (CI sets it).
	envRequireBrowser = "HERD_REQUIRE_BROWSER"
	// envChromium names the browser executable; default: chromium,
	// chromium-browser, google-chrome or headless-shell from PATH.
	envChromium = "HERD_CHROMIUM"
	// envScreenshots names a directory for the screenshots; default: the
	// test's temporary directory (kept only while the test runs, so set it
	// to look at them).
	envScreenshots = "HERD_SCREENSHOT_DIR"
)

// browser returns a chromedp context on a headless Chromium, or skips the
// test when there is none (fails it with HERD_REQUIRE_BROWSER=1).
func browser(t *testing.T, width, height int) context.Context {
	t.Helper()
	path := os.Getenv(envChromium)
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		msg := "no Chromium found: install it (apt-get install -y chromium) or name it in " + envChromium
		if os.Getenv(envRequireBrowser) == "1" {
			t.Fatal(msg + " [" + envRequireBrowser + "=1]")
		}
		t.Skip(msg)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(width, height),
		chromedp.Flag("hide-scrollbars", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// text returns the text of the element with id.
func text(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.getElementById(%q) || {}).textContent || ""`, id)))
	if err != nil {
		t.Fatalf("text of #%s: %v", id, err)
	}
	return s
}

// js evaluates expr in the page.
func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// within polls cond every 10ms and returns how long it took to hold,
// failing the test after limit.
func within(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// screenshot saves the page as name in the screenshot directory.
func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv(envScreenshots)
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return path
}

// The page in a real browser: it shows the master, follows a hand-over
// within a second without a reload, lists a process that joins, steps the
// master down from its button after a confirm, colours an entry near its
// TTL red, and counts a dead letter. The screenshot shows the page at the
// end.
func TestBrowser(t *testing.T) {
	ctx := browser(t, 1280, 1000)
	inst := redistest.Start(t, redistest.Default(t))
	// The master removes a slave whose heartbeat is older than its
	// SlaveTimeout: here longer than the 80% of ProcessTTL (3s) at which
	// the page shows an entry red, so that one can be.
	var nodes []*masterelection.MasterElection
	for _, id := range []string{"api-1", "api-2", "worker-1"} {
		cfg := herdtest.Config("orders", id)
		cfg.SlaveTimeout = 2900 * time.Millisecond
		nodes = append(nodes, herdtest.Node(t, inst, cfg))
	}
	herdtest.WaitRegistered(t, nodes[0], 3)
	nodes[0].SetMetadata(map[string]any{"zone": "eu-west-1", "version": "2.4.1"})
	nodes[2].SetMetadata(map[string]any{"zone": "eu-central-1", "queues": []string{"emails", "invoices"}})
	srv := served(t, inst, "orders", Options{AllowStepDown: true, AssignSets: []string{"cameras"}})

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL)); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, "the master shown", func() bool { return text(t, ctx, "master-id") == "api-1" })
	if got := text(t, ctx, "master-term"); got != fmt.Sprint(nodes[0].Term()) {
		t.Fatalf("term shown %q, want %d", got, nodes[0].Term())
	}
	if got := text(t, ctx, "count-dead"); got != "0" {
		t.Fatalf("dead letters shown %q, want 0", got)
	}
	js[bool](t, ctx, `window.herdMark = 42, true`) // gone if the page reloads

	// A hand-over: the page follows within a second, without a reload.
	if err := nodes[0].Transfer(context.Background(), "worker-1"); err != nil {
		t.Fatal(err)
	}
	took := within(t, time.Second, "the new master shown", func() bool { return text(t, ctx, "master-id") == "worker-1" })
	t.Logf("the page showed the new master %s after Transfer returned", took.Round(time.Millisecond))
	if js[int](t, ctx, `window.herdMark || 0`) != 42 {
		t.Fatal("the page reloaded")
	}
	within(t, time.Second, "the failover listed", func() bool {
		return strings.Contains(text(t, ctx, "failovers"), "api-1 → worker-1")
	})

	// A process joins.
	cfg := herdtest.Config("orders", "api-3")
	cfg.SlaveTimeout = 2900 * time.Millisecond
	herdtest.Node(t, inst, cfg)
	took = within(t, 2*time.Second, "api-3 listed", func() bool {
		return js[bool](t, ctx, `!!document.querySelector('tr[data-process-id="api-3"]')`)
	})
	t.Logf("the page listed api-3 %s after it started", took.Round(time.Millisecond))

	// The step-down button asks first, then hands over.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	asked := make(chan string, 1)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			asked <- ev.Message
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			return
		}
	}()
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("stepdown-to"), "api-2"), chromedp.Click(chromedp.ID("stepdown"))); err != nil {
		t.Fatal(err)
	}
	select {
	case q := <-asked:
		if !strings.Contains(q, "Ask worker-1") || !strings.Contains(q, "hand over to api-2") {
			t.Fatalf("confirm asked %q", q)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no confirm before the step-down")
	}
	within(t, 5*time.Second, "api-2 master", func() bool { return text(t, ctx, "master-id") == "api-2" })
	within(t, 5*time.Second, "the answer shown", func() bool {
		return strings.Contains(text(t, ctx, "stepdown-note"), "api-2 is master")
	})

	// An entry near its TTL (3s) is red; fresh ones are not.
	stale := fmt.Sprintf(`{"processId":"batch-7","nodeId":"batch-7","role":"slave","identifier":"nightly-batch","lastSeen":%q,"capabilities":{"canProcessDetections":false,"maxSubscriptions":5,"preferredWorkload":20}}`,
		time.Now().Add(-2600*time.Millisecond).UTC().Format(time.RFC3339Nano))
	herdtest.Admin(t, inst.Client(t), "HSET", "orders:processes", "batch-7", stale)
	within(t, 2*time.Second, "batch-7 red", func() bool {
		return js[bool](t, ctx, `!!document.querySelector('tr[data-process-id="batch-7"] .hb.hb-late')`)
	})
	if n := js[int](t, ctx, `document.querySelectorAll('tr[data-process-id^="api-"] .hb.hb-late').length`); n != 0 {
		t.Fatalf("%d fresh entries shown red", n)
	}

	// A dead letter is counted, in red.
	addDeadLetter(t, inst, "orders")
	within(t, 2*time.Second, "the dead letter counted", func() bool {
		return text(t, ctx, "count-dead") == "1" && js[bool](t, ctx, `document.getElementById('count-dead').classList.contains('has-dead')`)
	})
	// An item set of package assign: one item owned, one moving, one
	// unassigned, and each slave's planned and owned counts.
	if got := text(t, ctx, "assign-sets"); !strings.Contains(got, "0 owned · 0 moving · 0 waiting · 0 unassigned · 0 removed") {
		t.Fatalf("the watched set before it has items: %q", got)
	}
	deadline := fmt.Sprint(time.Now().Add(time.Hour).UnixMilli())
	admin := inst.Client(t)
	herdtest.Admin(t, admin, "SADD", "orders:assign:cameras:items", "cam-1", "cam-2", "cam-3")
	herdtest.Admin(t, admin, "HSET", "orders:assign:cameras:plan", "cam-1", "api-3", "cam-2", "worker-1")
	herdtest.Admin(t, admin, "HSET", "orders:assign:cameras:own", "cam-1", deadline+" api-3", "cam-2", deadline+" api-3")
	within(t, 2*time.Second, "the assignments shown", func() bool {
		return strings.Contains(text(t, ctx, "assign-sets"), "1 owned · 1 moving · 0 waiting · 1 unassigned · 0 removed") &&
			js[string](t, ctx, `(document.querySelector('[data-set="cameras"] tr[data-slave="api-3"]') || {}).textContent || ""`) == "api-312" &&
			js[string](t, ctx, `(document.querySelector('[data-set="cameras"] tr[data-slave="worker-1"]') || {}).textContent || ""`) == "worker-110"
	})
	t.Logf("looked at the page with a red heartbeat: %s", screenshot(t, ctx, "dashboard.png"))
}

// Without -allow-step-down the button is disabled and says why; on a
// phone's width the page has no horizontal scroll.
func TestBrowserPhoneAndDisabledStepDown(t *testing.T) {
	ctx := browser(t, 390, 844)
	inst := redistest.Start(t, redistest.Default(t))
	herdtest.Herd(t, inst, "orders", "api-1", "api-2")
	srv := served(t, inst, "orders", Options{})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(srv.URL)); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, "the master shown", func() bool { return text(t, ctx, "master-id") == "api-1" })
	if !js[bool](t, ctx, `document.getElementById('stepdown').disabled`) ||
		!strings.Contains(text(t, ctx, "stepdown-note"), "-allow-step-down") {
		t.Fatal("the step-down button is enabled without -allow-step-down")
	}
	// Every element fits the screen's width (none sticks out to the right).
	if w := js[int](t, ctx, `Math.max(...Array.from(document.querySelectorAll('body *')).map(e => Math.ceil(e.getBoundingClientRect().right))) - 390`); w > 0 {
		t.Fatalf("the page is %dpx wider than the phone's screen", w)
	}
	screenshot(t, ctx, "dashboard-phone.png")
}
