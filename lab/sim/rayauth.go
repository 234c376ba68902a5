package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// Ray's token authentication, as Ray's source has it (lab/README.md, "Ray's token
// authentication"):
//   - The mode is RAY_AUTH_MODE (token or disabled; Ray ≥ 2.52, src/ray/rpc/authentication/
//     authentication_mode.cc). From Ray 2.59 (PR #64755) `ray start --head` with
//     RAY_AUTH_MODE unset turns token mode on whenever a token exists, and sets
//     RAY_AUTH_MODE=token for the processes it starts (authentication_token_setup.py,
//     maybe_enable_token_auth_if_token_available); a worker's `ray start --address` and a
//     driver's ray.init(address=...) do not.
//   - The token is RAY_AUTH_TOKEN, else the first line of RAY_AUTH_TOKEN_PATH (set but
//     unreadable or empty is an error, never a fallback), else ~/.ray/auth_token, trimmed
//     (authentication_token_loader.cc, TryLoadTokenFromSources).
//   - In token mode every client sends `authorization: Bearer <token>` and every server
//     refuses a call without it, or with another, Unauthenticated.

// rayAuthFrom is the first Ray with token authentication; rayAuthByDefault the first whose
// head turns it on from a token alone.
const (
	rayAuthFrom      = "2.52"
	rayAuthByDefault = "2.59"
)

// errNoRayToken is Ray's TOKEN_AUTH_ENABLED_BUT_NO_TOKEN_FOUND_ERROR_MESSAGE
// (authentication_constants.py).
var errNoRayToken = errors.New("Token authentication is enabled but no authentication token was found. Please provide an authentication token using one of these methods:\n  1. Set the RAY_AUTH_TOKEN environment variable\n  2. Set the RAY_AUTH_TOKEN_PATH environment variable (pointing to a token file)\n  3. Create a token file at the default location: ~/.ray/auth_token")

// rayUnauthenticated is the GCS's answer to a call without the cluster's token (Ray's
// src/ray/rpc/authentication/tests/grpc_auth_token_tests.cc).
const rayUnauthenticated = "InvalidAuthToken: Authentication token is missing or incorrect"

// loadRayToken is the token from Ray's sources in Ray's order ("" when there is none).
func loadRayToken() (string, error) {
	if t := os.Getenv("RAY_AUTH_TOKEN"); t != "" {
		return strings.TrimSpace(t), nil
	}
	if p := os.Getenv("RAY_AUTH_TOKEN_PATH"); p != "" {
		t := firstLine(p)
		if t == "" {
			return "", errors.New("RAY_AUTH_TOKEN_PATH is set but file cannot be opened or is empty: " + p)
		}
		return t, nil
	}
	home := os.Getenv("HOME")
	if home == "" {
		home = "."
	}
	return firstLine(filepath.Join(home, ".ray", "auth_token")), nil
}

func firstLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// imageRay is the image's Ray version ("" without Ray).
func imageRay() string {
	r, _ := imageRelease()
	return r.ray
}

// hasRayAuth says whether a Ray version has token authentication.
func hasRayAuth(ray string) bool { return ray != "" && atLeast(ray, rayAuthFrom) }

// tokenModeOn says whether this process runs Ray in token mode (RAY_AUTH_MODE=token).
func tokenModeOn() bool {
	return hasRayAuth(imageRay()) && strings.EqualFold(os.Getenv("RAY_AUTH_MODE"), "token")
}

// startAuth decides `ray start`'s token mode on the image's Ray: the token the cluster's
// servers require ("" for none), or why the start fails.
func startAuth(head bool) (string, error) { return startAuthOn(imageRay(), head) }

func startAuthOn(ray string, head bool) (string, error) {
	if !hasRayAuth(ray) {
		return "", nil
	}
	if mode, set := os.LookupEnv("RAY_AUTH_MODE"); set {
		if !strings.EqualFold(mode, "token") {
			return "", nil
		}
		t, err := loadRayToken()
		if err == nil && t == "" {
			err = errNoRayToken
		}
		return t, err
	}
	if !head || !atLeast(ray, rayAuthByDefault) {
		return "", nil
	}
	t, err := loadRayToken()
	if err != nil || t == "" {
		if err == nil {
			rayLog("WARNING", "authentication_token_setup.py:77", "Token authentication is disabled for this Ray cluster. Anyone with network access to the cluster can run arbitrary code and access its data. To enable token authentication, generate a token with `ray get-auth-token --generate` or set RAY_AUTH_MODE=token. For more information, see https://docs.ray.io/en/latest/ray-security/token-auth.html")
		}
		return "", err
	}
	// The processes the head starts inherit the mode (_enable_token_auth).
	os.Setenv("RAY_AUTH_MODE", "token")
	rayLog("WARNING", "authentication_token_setup.py:88", "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out. For more information, see https://docs.ray.io/en/latest/ray-security/token-auth.html")
	return t, nil
}

// clientToken is what this process's Ray clients send: the token, in token mode.
func clientToken() string {
	if !tokenModeOn() {
		return ""
	}
	t, _ := loadRayToken()
	return t
}
