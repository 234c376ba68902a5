// Package activities holds tpdeploy's side effects, grouped by what they touch: the node
// (netlink, sysfs), reachability (TCP), containers (Docker Engine API), Ray and vLLM. Every
// node-bound activity runs on that node's own task queue, served by the node's agent. Their
// names, requests, results and error types are package contract's, which callers use
// directly.
package activities
