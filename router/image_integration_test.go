//go:build integration

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/lab"
)

// The router's FROM-scratch image runs: its static binary serves the routes of its state
// file (a bind mount) from the first request, its admin socket in the image's /run, and asks
// for the API key.
func TestRouterImageServesItsStateFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eng, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	bin, err := images.GoBinary(ctx, "./router", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := images.Ensure(ctx, eng, lab.RouterImageOf(bin)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "routes.json"), []byte(`{"models": [{"id": "m1", "replicas": [{"name": "c1", "url": "http://10.0.0.1:8000"}]}, {"id": "m2"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key"), []byte("sk-img\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	created, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: "tpd-router-image-test",
		Config: &container.Config{Image: lab.RouterImage,
			Cmd: []string{"--listen", ":8000", "--state", "/state/routes.json", "--api-key-file", "/state/key"}},
		HostConfig: &container.HostConfig{Binds: []string{dir + ":/state"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = eng.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
	}()
	if _, err := eng.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err := eng.ContainerInspect(ctx, created.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ip string
	for _, n := range info.Container.NetworkSettings.Networks {
		if n.IPAddress.IsValid() {
			ip = n.IPAddress.String()
		}
	}
	if ip == "" {
		t.Fatalf("the router's container has no address: %+v", info.Container.NetworkSettings.Networks)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ip+":8000/v1/models", nil)
	req.Header.Set("Authorization", "Bearer sk-img")
	var resp *http.Response
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err = http.DefaultClient.Do(req); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Data []struct{ ID string } }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != 200 || len(list.Data) != 2 || list.Data[0].ID != "m1" || list.Data[1].ID != "m2" {
		t.Fatalf("/v1/models: %d %+v %v", resp.StatusCode, list, err)
	}
	noKey, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ip+":8000/v1/models", nil)
	if resp, err := http.DefaultClient.Do(noKey); err != nil || resp.StatusCode != 401 {
		t.Fatalf("without the key: %v %v", resp, err)
	}
}
