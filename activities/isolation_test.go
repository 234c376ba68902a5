package activities

import (
	"slices"
	"testing"

	"github.com/moby/moby/api/types/container"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Issue #36, item 7: with IPC host every cluster's containers on a node share the host's
// /dev/shm (vLLM's shared-memory broadcast rings, NCCL's segments) and its SysV IPC, and
// Docker's default capabilities (MKNOD, DAC_OVERRIDE, CHOWN, SETUID, ...) are more than
// vLLM, Ray and NCCL use. A real node's containers get an IPC namespace of their own with
// the /dev/shm vLLM asks for (its docs: --ipc=host or --shm-size; run_cluster.sh gives
// 10.24g), and no capability but what the plan needs.
func TestContainersHaveTheirOwnIPCAndNoCapabilitiesButThePlans(t *testing.T) {
	c := spec.Cluster{Name: "tpdtest-iso", Image: "vllm/vllm-openai:v0.22.1", Model: spec.Model{Path: "Org/m"}, Parallel: spec.Parallel{Tensor: 1},
		Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead}}}.WithDefaults()
	req := contract.StartRayRequest{Node: "node-a", Deployment: contract.Deployment{Cluster: c.Name, ID: "d"}, Spec: c, Plan: netplan.NodePlan{Name: "node-a"}}
	hostConfig := func(s containerSpec) *container.HostConfig {
		t.Helper()
		o, err := s.createOptions()
		if err != nil {
			t.Fatal(err)
		}
		return o.HostConfig
	}
	hc := hostConfig(rayHeadSpec(req, DefaultContainerOptions()))
	if hc.IpcMode != "private" {
		t.Errorf("IPC mode %q; want private (host shares /dev/shm with every cluster on the node)", hc.IpcMode)
	}
	if hc.ShmSize < 10<<30 {
		t.Errorf("/dev/shm of %d bytes; want at least vLLM's run_cluster.sh's 10 GiB", hc.ShmSize)
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || len(hc.CapAdd) != 0 {
		t.Errorf("capabilities: drop %v, add %v; want drop [ALL], add none", hc.CapDrop, hc.CapAdd)
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("security options %v lack no-new-privileges", hc.SecurityOpt)
	}
	// With the plan's HCAs: their devices and IPC_LOCK (ibv_reg_mr pins memory), only.
	s := rayHeadSpec(req, DefaultContainerOptions())
	s.Devices, s.CapAdd = []string{"/dev/infiniband/uverbs0:/dev/infiniband/uverbs0"}, []string{"IPC_LOCK"}
	if hc := hostConfig(s); !slices.Equal(hc.CapAdd, []string{"IPC_LOCK"}) || !slices.Equal(hc.CapDrop, []string{"ALL"}) {
		t.Errorf("with RDMA: drop %v, add %v; want drop [ALL], add [IPC_LOCK]", hc.CapDrop, hc.CapAdd)
	}
	// A port below 1024 (where the policy allows one) needs NET_BIND_SERVICE, for vLLM's.
	low := c
	low.Ports.VLLM = 443
	lowReq := req
	lowReq.Spec = low
	if hc := hostConfig(rayHeadSpec(lowReq, DefaultContainerOptions())); !slices.Equal(hc.CapAdd, []string{"NET_BIND_SERVICE"}) {
		t.Errorf("vLLM on port 443: add %v; want [NET_BIND_SERVICE]", hc.CapAdd)
	}
}
