// Package e2e runs tpdeploy end to end: the real Temporal dev server, the lab's node
// containers running the real worker binary, the Ray/vLLM simulator, and the real starter.
//
// Every test here carries build tag integration (it needs the Docker engine and the pinned
// Temporal CLI): `make test` runs them, `make check` only compiles this file.
package e2e
