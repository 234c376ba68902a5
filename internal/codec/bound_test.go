package codec

import (
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

// Issue #36, item 4: the associated data was the key ID alone, so whoever reads a history
// could copy an encrypted input or signal (a teardown, an old deploy) into a workflow of
// their own and have it decrypt. A payload encoded for a workflow is bound to its namespace
// and workflow ID: decoded for another it fails, and its binding cannot be edited.
func TestPayloadsDecryptOnlyInTheWorkflowTheyWereWrittenFor(t *testing.T) {
	c := mustNew(t, newKey(t))
	for_ := func(ns, id string) converter.PayloadCodec {
		return c.WithSerializationContext(converter.WorkflowSerializationContext{Namespace: ns, WorkflowID: id})
	}
	plain := &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte("json/plain")}, Data: []byte(`{"cluster":"prod"}`)}
	enc, err := for_("gpu", "teardown-prod").Encode([]*commonpb.Payload{plain})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := for_("gpu", "teardown-prod").Decode(enc); err != nil {
		t.Fatalf("its own workflow: %v", err)
	}
	activity := c.WithSerializationContext(converter.ActivitySerializationContext{Namespace: "gpu", WorkflowID: "teardown-prod", ActivityType: "RemoveContainers"})
	if _, err := activity.Decode(enc); err != nil {
		t.Fatalf("an activity of its own workflow: %v", err)
	}
	for _, tc := range []struct{ ns, id string }{{"gpu", "attacker-wf"}, {"other-ns", "teardown-prod"}} {
		_, err := for_(tc.ns, tc.id).Decode(enc)
		if err == nil || !strings.Contains(err.Error(), "teardown-prod") {
			t.Errorf("decoded in %s/%s: %v; want a refusal naming the workflow it was written for", tc.ns, tc.id, err)
		}
	}
	// Rewriting the binding in the metadata breaks the ciphertext.
	forged := &commonpb.Payload{Metadata: map[string][]byte{}, Data: enc[0].Data}
	for k, v := range enc[0].Metadata {
		forged.Metadata[k] = v
	}
	forged.Metadata[MetadataBinding] = []byte(binding("gpu", "attacker-wf"))
	if _, err := for_("gpu", "attacker-wf").Decode([]*commonpb.Payload{forged}); err == nil {
		t.Error("a payload with its binding rewritten decrypted")
	}
	// The codec server, which decodes without a workflow, still reads it.
	if _, err := c.Decode(enc); err != nil {
		t.Errorf("without a workflow (the codec server): %v", err)
	}
	// A schedule encodes its action's input for the action's workflow ID; the server runs
	// each action as ID-TIME (RFC 3339).
	sched, err := for_("gpu", "redeploy-prod").Encode([]*commonpb.Payload{plain})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := for_("gpu", "redeploy-prod-2026-12-01T10:00:00Z").Decode(sched); err != nil {
		t.Errorf("a scheduled run: %v", err)
	}
	if _, err := for_("gpu", "redeploy-prod-evil").Decode(sched); err == nil {
		t.Error("decoded in redeploy-prod-evil")
	}
}
