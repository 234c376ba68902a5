package e2e

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/tpdeploy/tpdeploy/control"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// chromium is Debian's browser, which `make deps` installs.
const chromium = "/usr/bin/chromium"

// TestStartFromTheTemporalUI drives the dev server's real Web UI in a headless browser:
// it fills the Start Workflow form as the README says, submits it, and the deploy runs on
// the lab to serving.
func TestStartFromTheTemporalUI(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("Debian's chromium is required (make deps installs it): %v", err)
	}
	s := labSpec(t, "e2e-ui")
	defer teardown(t, s.Name)
	in, err := json.Marshal(workflows.DeployRequest{Spec: s, Trigger: "ui"})
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first action starts the browser; later ones run under a timeout.
	if err := chromedp.Do(ctx, chromedp.Navigate(theLab.UI+"/namespaces/default/workflows/start-workflow")); err != nil {
		t.Fatal(err)
	}
	step, cancelStep := context.WithTimeout(ctx, 90*time.Second)
	defer cancelStep()
	err = chromedp.Do(step,
		chromedp.WaitVisible(chromedp.ID("workflowId")),
		chromedp.SendKeys(chromedp.ID("workflowId"), workflows.DeployWorkflowID(s.Name)),
		chromedp.SendKeys(chromedp.ID("taskQueue"), "tpdeploy"),
		chromedp.SendKeys(chromedp.ID("workflowType"), "DeployCluster"),
		chromedp.Click(chromedp.CSS(".cm-content")),
		// Inserted at once: typed key by key, the editor would close brackets itself.
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, input.InsertText, input.InsertTextParams{Text: string(in)})
			return err
		}),
	)
	if err != nil {
		t.Fatalf("fill the Start Workflow form: %v", err)
	}
	clicked, err := chromedp.Run(step, chromedp.Evaluate[bool](`(() => {
		const b = [...document.querySelectorAll('button')].find(b => b.textContent.trim() === 'Start Workflow' && !b.disabled);
		if (!b) return false;
		b.click();
		return true;
	})()`))
	if err != nil || !clicked {
		t.Fatalf("submit: clicked %v, %v", clicked, err)
	}
	var res workflows.DeployResult
	wctx, cancelWait := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancelWait()
	eventually(t, 30*time.Second, "the UI started the deploy", func() bool {
		_, err := tc.DescribeWorkflowExecution(wctx, workflows.DeployWorkflowID(s.Name), "")
		return err == nil
	})
	if err := tc.GetWorkflow(wctx, workflows.DeployWorkflowID(s.Name), "").Get(wctx, &res); err != nil {
		t.Fatalf("deploy started from the UI: %v", control.Reason(err))
	}
	if res.Endpoint == "" {
		t.Fatalf("result %+v", res)
	}
	if err := endpointServes(t, s); err != nil {
		t.Fatal(err)
	}
}
