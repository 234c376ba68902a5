package activities

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/netplan"
)

// rdmaMapping is what the agent grants a node's containers for the plan's HCAs: each
// HCA's verbs device, found through sysfs (/sys/class/infiniband/HCA/device/
// infiniband_verbs/uverbsN), mapped at /dev/infiniband/uverbsN, and IPC_LOCK. libibverbs
// opens that character device for every HCA it lists (rdma-core's open_cdev); without it
// NCCL logs `NET/IB : No device found.` and silently uses sockets (upstream.md §9). Host
// networking, host IPC and --gpus bring no such device; nothing privileged is needed.
type rdmaMapping struct {
	Devices []string // host:container
	Mapped  []string // uverbsN
	// Note says why a planned HCA has no device in the containers (the policy, a device
	// missing), or that memlock is limited.
	Note string
}

func memlockUnlimited(ulimits []string) bool {
	for _, u := range ulimits {
		if strings.HasPrefix(u, "memlock=-1") {
			return true
		}
	}
	return false
}

func (d *docker) rdmaMapping(np netplan.NodePlan) rdmaMapping {
	var m rdmaMapping
	if len(np.RDMA) == 0 {
		return m
	}
	if d.policy != nil {
		if ok, why := d.policy.RDMAAllowed(); !ok {
			m.Note = why
			return m
		}
	}
	var notes []string
	for _, hca := range np.RDMA {
		if err := validHCAName(hca.Name); err != nil {
			notes = append(notes, fmt.Sprintf("the plan's HCA %v: nothing mapped", err))
			continue
		}
		uv := d.sys.uverbsOf(hca.Name)
		if uv == "" {
			notes = append(notes, fmt.Sprintf("%s has no verbs device in sysfs (%s): is ib_uverbs loaded?", hca.Name, d.sys.sys("class/infiniband", hca.Name, "device/infiniband_verbs")))
			continue
		}
		if slices.Contains(m.Mapped, uv) {
			continue // two ports of one HCA share its device
		}
		host := d.mounts.hostPath("/dev/infiniband/" + uv)
		if _, err := os.Stat(host); err != nil {
			notes = append(notes, fmt.Sprintf("%s's device %s is not there (%v)", hca.Name, d.mounts.nodePath(host), err))
			continue
		}
		m.Devices = append(m.Devices, host+":/dev/infiniband/"+uv)
		m.Mapped = append(m.Mapped, uv)
	}
	if len(m.Mapped) > 0 && !memlockUnlimited(d.opts.Ulimits) {
		notes = append(notes, "the containers' memlock is not unlimited (--ulimits has no memlock=-1:-1); IPC_LOCK lets ibv_reg_mr pin past it")
	}
	m.Note = strings.Join(notes, "; ")
	return m
}

// withRDMA gives s the plan's RDMA devices and IPC_LOCK.
func (d *docker) withRDMA(s containerSpec, np netplan.NodePlan) containerSpec {
	m := d.rdmaMapping(np)
	if len(m.Devices) > 0 {
		s.Devices, s.CapAdd = m.Devices, append(slices.Clip(s.CapAdd), "IPC_LOCK")
	}
	if m.Note != "" {
		d.logger().Warn("rdma devices", zap.String("container", s.Name), zap.Strings("mapped", m.Mapped), zap.String("note", m.Note))
	}
	return s
}
