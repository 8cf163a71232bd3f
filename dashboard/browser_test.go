package dashboard_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/ilbproject/ilb/weights"
)

// chromiumPath is Debian's chromium package (installed by .ci/run).
const chromiumPath = "/usr/bin/chromium"

// pageCell is a heatmap cell as the page renders it.
type pageCell struct {
	Source, Model, Cluster, Share string
}

// TestBrowserHeatmap loads the page in a real headless Chromium against
// the running demo world: the heatmap shows the live weights (every
// cell's data-share is its weight / 10000), a click on a decision row
// opens its explanation with the request id and the chosen cluster, and
// the page raises no JavaScript exception. It saves full-page screenshots
// (light and dark) to $ILB_SCREENSHOT_DIR, else to a temporary directory.
func TestBrowserHeatmap(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("ILB_REQUIRE_CHROMIUM") == "1" {
			t.Fatalf("ILB_REQUIRE_CHROMIUM=1 but %s is missing: %v (apt-get install chromium)", chromiumPath, err)
		}
		t.Skipf("%s is missing (apt-get install chromium, or set ILB_REQUIRE_CHROMIUM=1 to fail instead): %v", chromiumPath, err)
	}
	d := startDemo(t)
	ctx, exceptions := browser(t)

	if err := chromedp.Do(ctx,
		chromedp.Navigate(d.URL+"/ui/?refresh=0.5"),
		chromedp.WaitVisible(chromedp.CSS(`#heatmaps td.cell`)),
		chromedp.WaitVisible(chromedp.CSS(`#decisions tbody tr[data-request-id]`)),
	); err != nil {
		t.Fatalf("load the page: %v", err)
	}

	// The heatmap is the weights in force; the controller may publish a
	// version between the page's poll and Current(): read both until
	// they agree.
	var cells []pageCell
	var cur *weights.Weights
	for try := 0; ; try++ {
		var err error
		cells, err = chromedp.Run(ctx, chromedp.Evaluate[[]pageCell](`[...document.querySelectorAll("#heatmaps td.cell")].map(td => ({
			Source: td.dataset.source, Model: td.dataset.model, Cluster: td.dataset.cluster, Share: td.dataset.share}))`))
		if err != nil {
			t.Fatal(err)
		}
		version, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("heatmaps").dataset.version`))
		if err != nil {
			t.Fatal(err)
		}
		cur = d.Stack.App.Controller.Current()
		if version == cur.Version() {
			break
		}
		if try == 20 {
			t.Fatalf("the page shows weights %s, the controller %s", version, cur.Version())
		}
		time.Sleep(250 * time.Millisecond)
	}
	checkPageCells(t, cells, cur)
	// The versions list marks as in force the version the header shows
	// (or none, while the list has not caught up with it).
	marks, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[document.getElementById("version").textContent,
		...[...document.querySelectorAll("#versions li")].filter(li => li.querySelector(".badge.ok")).map(li => li.dataset.version)]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) > 2 || len(marks) == 2 && marks[1] != marks[0] {
		t.Errorf("the header shows weights %s, the versions list marks %v in force", marks[0], marks[1:])
	}

	// Click a decision that was routed: its explanation names the request
	// and the cluster ILB chose.
	id, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`(document.querySelector("#decisions tbody tr[data-request-id]:not(.refused)") || {dataset: {}}).dataset.requestId || ""`))
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := d.Stack.App.ExtProc.Decisions().Get(id)
	if id == "" || !ok {
		t.Fatalf("no routed decision row on the page (first id %q, in the log: %v)", id, ok)
	}
	row := fmt.Sprintf(`#decisions tbody tr[data-request-id=%q] td:nth-child(3)`, id)
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(cctx,
		chromedp.Click(chromedp.CSS(row)),
		chromedp.WaitVisible(chromedp.CSS(`#explain-chosen`)),
	); err != nil {
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash + " | hidden=" + document.getElementById("explain-panel").hidden + " | " + document.getElementById("explain-body").innerText.slice(0, 300)`))
		t.Fatalf("open the explanation of %s: %v (page: %s)", id, err, state)
	}
	shownID, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#explain-id`)))
	if err != nil {
		t.Fatal(err)
	}
	chosen, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#explain-chosen`)))
	if err != nil {
		t.Fatal(err)
	}
	if shownID != id || strings.TrimSpace(chosen) != rec.Chosen {
		t.Errorf("explanation shows request %q chosen %q, want %q chosen %q", shownID, chosen, id, rec.Chosen)
	}
	candidates, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#explain-candidates tbody tr").length`))
	if err != nil {
		t.Fatal(err)
	}
	if candidates != len(rec.Candidates) {
		t.Errorf("explanation lists %d candidates, the record %d", candidates, len(rec.Candidates))
	}

	dir := os.Getenv("ILB_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, scheme := range []string{"light", "dark"} {
		media := emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}}
		if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, media); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`window.scrollTo(0, 0)`)); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.Sleep(700*time.Millisecond)); err != nil { // a poll redraws the charts
			t.Fatal(err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "ilb-dashboard-"+scheme+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot (%s): %s", scheme, path)
	}
	for _, e := range exceptions() {
		t.Errorf("JavaScript exception on the page: %s", e)
	}
}

// browser starts a headless Chromium for the test and returns its context
// and a func that returns the JavaScript exceptions the page raised.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	}
	var mu sync.Mutex
	var exceptions []string
	listen := func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
			mu.Lock()
			exceptions = append(exceptions, msg)
			mu.Unlock()
		}
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf), chromedp.WithListener(listen))
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	if err := chromedp.Do(bctx); err != nil { // starts the browser, which lives as long as bctx
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	// Each action gets at most a minute, the whole test's browser budget.
	ctx, cancel := context.WithTimeout(bctx, time.Minute)
	t.Cleanup(cancel)
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(exceptions)
	}
}

// checkPageCells compares the page's heatmap with w: every (source,
// model) cell of w is on the page with one column per cluster serving the
// model, each cell's data-share is its weight / weights.Total (0 when the
// cluster is not a target), printed with 4 decimals.
func checkPageCells(t *testing.T, cells []pageCell, w *weights.Weights) {
	t.Helper()
	if len(cells) == 0 {
		t.Fatal("the heatmap has no cells")
	}
	rows := map[[2]string]bool{}
	shown := 0
	for _, c := range cells {
		cell, ok := w.Cell(c.Source, c.Model)
		if !ok {
			t.Errorf("page cell (%s, %s) is not a cell of the weights", c.Source, c.Model)
			continue
		}
		rows[[2]string{c.Source, c.Model}] = true
		var want uint32
		for _, tg := range cell.Targets {
			if tg.Cluster == c.Cluster {
				want = tg.Weight
				shown++
			}
		}
		got, err := strconv.ParseFloat(c.Share, 64)
		if err != nil {
			t.Errorf("(%s, %s, %s): data-share %q: %v", c.Source, c.Model, c.Cluster, c.Share, err)
			continue
		}
		if math.Abs(got-float64(want)/weights.Total) > 0.00005 {
			t.Errorf("(%s, %s, %s): page share %s, weights %d/%d", c.Source, c.Model, c.Cluster, c.Share, want, weights.Total)
		}
	}
	targets := 0
	for _, c := range w.Cells() {
		if !rows[[2]string{c.Source, c.Model}] {
			t.Errorf("cell (%s, %s) of the weights is not on the page", c.Source, c.Model)
		}
		targets += len(c.Targets)
	}
	if shown != targets {
		t.Errorf("the page shows %d of the %d targets of the weights", shown, targets)
	}
	t.Logf("heatmap: %d cells match weights %s", len(cells), w.Version())
}
