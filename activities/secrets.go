package activities

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/moby/client"

	"go.temporal.io/sdk/temporal"
	"golang.org/x/sys/unix"

	"github.com/tpdeploy/tpdeploy/internal/confined"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// maxSecretSize bounds a secret file: a token is a few hundred bytes, and /dev/zero or a
// multi-gigabyte file must not grow the agent's memory.
const maxSecretSize = 64 << 10

// secretEnv resolves the spec's secret references on this node, within its policy: an
// agent variable secret_env names, or a regular file under secret_dirs (opened beneath it
// without following links, at most maxSecretSize). HF_TOKEN is for every vLLM process;
// VLLM_API_KEY (withAPIKey) only for the one that runs the API server, on the head. Values
// go into an exec's environment only, never into a container's configuration, a workflow
// input, result, log or error.
func (v *VLLM) secretEnv(s spec.Secrets, withAPIKey bool) (map[string]string, error) {
	out := map[string]string{}
	if s.HFToken != nil {
		v, err := v.resolveSecret("secrets.hf_token", *s.HFToken)
		if err != nil {
			return nil, err
		}
		out["HF_TOKEN"] = v
	}
	if s.APIKey != nil && withAPIKey {
		v, err := v.resolveSecret("secrets.api_key", *s.APIKey)
		if err != nil {
			return nil, err
		}
		out["VLLM_API_KEY"] = v
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// rayToken is the spec's secrets.ray_token resolved on this node within its policy, ""
// when the spec has none. It goes into a Ray container as a file (Ray.withRayToken) and
// into the agent's own GCS calls, never into a container's configuration, a workflow
// input, result, log or error.
func (v *VLLM) rayToken(ref *spec.SecretRef) (string, error) {
	if ref == nil {
		return "", nil
	}
	return v.resolveSecret("secrets.ray_token", *ref)
}

// endpointKey is vLLM's API key for a readiness check of endpoint (secrets.api_key,
// resolved on this node within its policy), or "" when the spec has none. The key goes
// only to this node's own address at the spec's vLLM port: vLLM's API server runs on the
// head, the node that checks it, so a request naming any other endpoint would be asking
// the agent to hand the key to someone else.
func (v *VLLM) endpointKey(c spec.Cluster, endpoint string) (string, error) {
	if c.Secrets.APIKey == nil {
		return "", nil
	}
	if err := v.net.checkOwnEndpoint(endpoint, c.WithDefaults().Ports.VLLM); err != nil {
		return "", err
	}
	return v.resolveSecret("secrets.api_key", *c.Secrets.APIKey)
}

// EndpointKey is endpointKey for the operations activities this agent serves (control's
// readiness checks on the head), for a spec signed as its policy requires (expired or
// revoked too: a check starts nothing): a function, not a method, so that it is no
// activity.
func EndpointKey(v *VLLM) func(c spec.Cluster, in *contract.Intent, endpoint string) (string, error) {
	return func(c spec.Cluster, in *contract.Intent, endpoint string) (string, error) {
		if v.enforced() {
			if _, err := v.verify(contract.Signature{Intent: in, Removal: true, Spec: &c}); err != nil {
				return "", err
			}
		}
		return v.endpointKey(c, endpoint)
	}
}

func (b *nodeBase) resolveSecret(field string, ref spec.SecretRef) (string, error) {
	bad := func(format string, args ...any) error {
		return temporal.NewNonRetryableApplicationError(b.name+": "+field+": "+fmt.Sprintf(format, args...), contract.ErrBadRequest, nil)
	}
	switch {
	case ref.Env != "":
		if err := b.allowed(func(p policy.Policy) error { return p.CheckSecretEnv(ref.Env) }); err != nil {
			return "", err
		}
		v := os.Getenv(ref.Env)
		if v == "" {
			return "", bad("agent environment variable %s is empty or unset", ref.Env)
		}
		return v, nil
	case ref.File != "":
		if err := b.allowed(func(p policy.Policy) error { return p.CheckSecretFile(ref.File) }); err != nil {
			return "", err
		}
		data, err := b.readSecretFile(ref.File)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(data)), nil
	}
	return "", bad("set env or file")
}

// readSecretFile reads a secret file beneath its secret directory: no link followed, a
// regular file only (not /dev/zero, not a FIFO that blocks), at most maxSecretSize. Its
// errors never hold the content.
func (b *nodeBase) readSecretFile(file string) ([]byte, error) {
	dirName, rel := filepath.Dir(file), filepath.Base(file)
	if b.policy != nil {
		d, _ := b.policy.SecretDir(file)
		r, err := filepath.Rel(d, filepath.Clean(file))
		if err != nil {
			return nil, b.deny("secret file %s: %v", file, err)
		}
		dirName, rel = d, r
	}
	dir, err := confined.Open(dirName)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: secret file %s: %v", b.name, file, err), contract.ErrBadRequest, nil)
	}
	defer dir.Close()
	f, err := dir.OpenFile(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		if confined.IsRefusal(err) {
			return nil, b.denyPath("secret file "+file, err)
		}
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: secret file %s: %v", b.name, file, err), contract.ErrBadRequest, nil)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: secret file %s: %v", b.name, file, err), contract.ErrBadRequest, nil)
	case !fi.Mode().IsRegular():
		return nil, b.deny("secret file %s is not a regular file (%s)", file, fi.Mode().Type())
	case fi.Size() > maxSecretSize:
		return nil, b.deny("secret file %s is %d bytes, more than the %d a secret may be", file, fi.Size(), maxSecretSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSecretSize+1))
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: secret file %s: read failed", b.name, file), contract.ErrBadRequest, nil)
	}
	if len(data) > maxSecretSize {
		return nil, b.deny("secret file %s grew past the %d bytes a secret may be", file, maxSecretSize)
	}
	return data, nil
}

// copySecretFiles copies files (container path: content) into a created container that has
// not started, readable by its owner only (Ray runs as the image's user, root in vLLM's
// images). Errors never hold the content.
func copySecretFiles(ctx context.Context, eng containerEngine, id string, files map[string]string) error {
	if len(files) == 0 {
		return nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel := strings.TrimPrefix(path.Clean(p), "/")
		var dirs []string
		for d := path.Dir(rel); d != "." && d != "/"; d = path.Dir(d) {
			dirs = append([]string{d}, dirs...)
		}
		for _, d := range dirs {
			if !seen[d] {
				seen[d] = true
				if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
					return err
				}
			}
		}
		body := files[p]
		if err := tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o400, Size: int64(len(body))}); err != nil {
			return err
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return errors.New("write a secret file into the archive")
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	_, err := eng.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: "/", Content: &buf})
	return err
}
