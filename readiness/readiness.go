// Package readiness is the test every part of tpdeploy uses to say that vLLM serves: plain
// HTTP, no Docker, no netlink, so the operator's CLI and the agent share it.
package readiness

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// Check is the readiness test every part of tpdeploy uses: GET /health answers 200
// and GET /v1/models lists the served name. fetch returns a body for a 200 answer only.
func Check(ctx context.Context, fetch func(ctx context.Context, url string) ([]byte, error), endpoint, served string) error {
	if _, err := fetch(ctx, endpoint+"/health"); err != nil {
		return err
	}
	body, err := fetch(ctx, endpoint+"/v1/models")
	if err != nil {
		return err
	}
	var models struct {
		Data []modelEntry `json:"data"`
	}
	if err := json.Unmarshal(body, &models); err != nil {
		return fmt.Errorf("GET %s/v1/models: %w", endpoint, err)
	}
	if !slices.Contains(models.Data, modelEntry{ID: served}) {
		return fmt.Errorf("GET %s/v1/models does not list %q", endpoint, served)
	}
	return nil
}

// modelEntry is the part of a /v1/models entry the readiness check compares.
type modelEntry struct {
	ID string `json:"id"`
}
