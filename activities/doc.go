// Package activities holds tpdeploy's side effects on a node, one struct per concern, each
// holding only the clients it uses (agent.go): the node's description (Probe: netlink,
// sysfs), reachability (TCP), containers and images (Docker Engine API), Ray, vLLM, the
// data-plane proof and the model's weights. Every node-bound activity runs on that node's
// own task queue, served by the node's agent. Their names, requests, results and error
// types are package contract's, which callers use directly.
//
// What the concerns share has no exported method, so that no activity is served twice:
// the node's identity and policy (nodeBase, embedded), its network (hostNet: netlink and
// sockets in its namespace, and what a request may listen on and dial), its allowed
// mounts (mounts: paths opened beneath them, package confined), its Docker engines
// (docker: the containers tpdeploy makes) and its sysfs and procfs (sysfs).
package activities
