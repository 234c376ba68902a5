//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// chromium is Debian's browser, which `make deps` installs.
const chromium = "/usr/bin/chromium"

// startForm is what the README tells an operator to type into the Start Workflow form.
type startForm struct {
	WorkflowID, TaskQueue, WorkflowType string
	Input                               []byte
}

// TestStartFromTheTemporalUI drives the dev server's real Web UI in a headless browser:
// it fills the Start Workflow form as the README says, submits it, and the deploy runs on
// the lab to serving.
func TestStartFromTheTemporalUI(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("Debian's chromium is required (make deps installs it): %v", err)
	}
	s := labSpec(t, "e2e-ui")
	defer teardown(t, s.Name)
	// The lab's agents want a signed spec: the input is what `starter sign` prints.
	in, err := json.Marshal(workflows.DeployRequest{Spec: s, Trigger: "ui", Intent: theLab.Sign(s)})
	if err != nil {
		t.Fatal(err)
	}
	form := startForm{WorkflowID: contract.DeployWorkflowID(s.Name), TaskQueue: "tpdeploy", WorkflowType: "DeployCluster", Input: in}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	browser, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first Run starts the browser, which lives as long as the context of that Run: it
	// must not be an attempt's (its timeout would close the browser for every later one).
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("start chromium: %v", err)
	}

	// The fill is retried, each time in a new tab; what it must achieve is not: the form
	// holds exactly what was meant, and the submit started the workflow.
	const attempts = 4
	var last error
	var lastTab context.Context
	for i := 1; i <= attempts; i++ {
		//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
		if _, err := tc.DescribeWorkflowExecution(context.Background(), form.WorkflowID, ""); err == nil {
			last = nil // an earlier attempt's click took after all
			break
		}
		tab, cancelTab := chromedp.NewContext(browser)
		defer cancelTab()
		if last = chromedp.Do(tab); last == nil {
			last = submitStartForm(tab, theLab.UI, form)
		}
		if last == nil {
			break
		}
		lastTab = tab
		t.Logf("start form, attempt %d of %d: %v", i, attempts, last)
	}
	if last != nil {
		t.Fatalf("submit the Start Workflow form: %v (%s)", last, saveUIArtifacts(t, lastTab))
	}

	var res workflows.DeployResult
	wctx, cancelWait := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancelWait()
	if err := tc.GetWorkflow(wctx, form.WorkflowID, "").Get(wctx, &res); err != nil {
		t.Fatalf("deploy started from the UI: %v", control.Reason(err))
	}
	if res.Endpoint == "" {
		t.Fatalf("result %+v", res)
	}
	if err := endpointServes(t, s); err != nil {
		t.Fatal(err)
	}
}

// submitStartForm opens the Start Workflow page, waits until the form is hydrated and the
// input editor is ready, fills the form, reads every field back, clicks Start and waits
// until the workflow exists. Any step that does not take is an error, never a guess.
func submitStartForm(browser context.Context, ui string, f startForm) error {
	ctx, cancel := context.WithTimeout(browser, 90*time.Second)
	defer cancel()
	err := chromedp.Do(ctx,
		chromedp.Navigate(ui+"/namespaces/default/workflows/start-workflow"),
		chromedp.WaitVisible(chromedp.ID("workflowId")),
		chromedp.WaitVisible(chromedp.CSS(`.cm-content[contenteditable="true"]`)),
	)
	if err != nil {
		return fmt.Errorf("page not ready: %w", err)
	}
	// SvelteKit may still be hydrating: a value typed into server-rendered markup can be
	// dropped. Typing, then reading back after a pause, shows whether it took.
	fields := []struct{ id, want string }{{"workflowId", f.WorkflowID}, {"taskQueue", f.TaskQueue}, {"workflowType", f.WorkflowType}}
	for _, fl := range fields {
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID(fl.id), fl.want)); err != nil {
			return fmt.Errorf("type %s: %w", fl.id, err)
		}
	}
	// CodeMirror: select what the editor holds and replace it in one insertion (typed key
	// by key, the editor would close brackets itself).
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		const c = document.querySelector('.cm-content');
		c.focus();
		return document.execCommand('selectAll');
	})()`))
	if err != nil {
		return fmt.Errorf("focus the input editor: %w", err)
	}
	if _, err := chromedp.Call(ctx, input.InsertText, input.InsertTextParams{Text: string(f.Input)}); err != nil {
		return fmt.Errorf("insert the input: %w", err)
	}
	// Let the form settle, then read everything back.
	if err := chromedp.Do(ctx, chromedp.Sleep(500*time.Millisecond)); err != nil {
		return err
	}
	for _, fl := range fields {
		got, err := chromedp.Run(ctx, chromedp.Value(chromedp.ID(fl.id)))
		if err != nil {
			return fmt.Errorf("read back %s: %w", fl.id, err)
		}
		if got != fl.want {
			return fmt.Errorf("field %s holds %q, want %q", fl.id, got, fl.want)
		}
	}
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const c = document.querySelector('.cm-content');
		const view = c.cmView && c.cmView.view;
		return view ? view.state.doc.toString() : c.innerText;
	})()`))
	if err != nil {
		return fmt.Errorf("read back the input: %w", err)
	}
	if err := sameJSON(text, f.Input); err != nil {
		return fmt.Errorf("input editor: %w", err)
	}
	clicked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		const b = [...document.querySelectorAll('button')].find(b => b.textContent.trim() === 'Start Workflow' && !b.disabled);
		if (!b) return false;
		b.click();
		return true;
	})()`))
	if err != nil || !clicked {
		return fmt.Errorf("no enabled Start Workflow button (clicked %v, %v)", clicked, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
		_, err := tc.DescribeWorkflowExecution(ctx, f.WorkflowID, "")
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Start Workflow was clicked but no workflow %s exists after 20 s: %v", f.WorkflowID, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// sameJSON compares the editor's text with the JSON meant, as values (the editor may
// reformat whitespace).
func sameJSON(got string, want []byte) error {
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		return fmt.Errorf("holds %q, not JSON: %v", clip(got, 120), err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		return err
	}
	if !reflect.DeepEqual(g, w) {
		return fmt.Errorf("holds %s, want %s", clip(got, 200), clip(string(want), 200))
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// saveUIArtifacts writes a screenshot and the page's text under .artifacts/ at the module
// root and says where they are.
func saveUIArtifacts(t *testing.T, browser context.Context) string {
	root, _ := images.ModuleRoot()
	dir := filepath.Join(root, ".artifacts", fmt.Sprintf("%s-%s", t.Name(), time.Now().Format("20060102-150405")))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "artifacts not saved: " + err.Error()
	}
	ctx, cancel := context.WithTimeout(browser, 15*time.Second)
	defer cancel()
	var saved, failed []string
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(90)); err == nil {
		p := filepath.Join(dir, "page.png")
		if err := os.WriteFile(p, png, 0o644); err == nil {
			saved = append(saved, p)
		}
	} else {
		failed = append(failed, "screenshot: "+err.Error())
	}
	if text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`)); err == nil {
		p := filepath.Join(dir, "page.txt")
		if err := os.WriteFile(p, []byte(text), 0o644); err == nil {
			saved = append(saved, p)
		}
	} else {
		failed = append(failed, "page text: "+err.Error())
	}
	msg := "saved " + strings.Join(saved, ", ")
	if len(failed) > 0 {
		msg += "; " + errors.Join(errors.New(strings.Join(failed, "; "))).Error()
	}
	return msg
}
