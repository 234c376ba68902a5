package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// SparkHCAs are the two RoCE HCAs of a DGX Spark's CX-7 port, one per PCIe x4 half, as
// ibdev2netdev shows them (upstream.md §9: rocep1s0f1 ↔ enp1s0f1np1, roceP2p1s0f1 ↔
// enP2p1s0f1np1), on the lab's fast and fast2 networks. Real Sparks name them alike on
// every machine, so the lab does too.
var SparkHCAs = [2]struct{ HCA, UVerbs, Network string }{
	{"rocep1s0f1", "uverbs0", "fast"},
	{"roceP2p1s0f1", "uverbs1", "fast2"},
}

// sparkRateMbps is each half's rate: a PCIe Gen5 x4 endpoint, about 100 Gb/s.
const sparkRateMbps = 100000

// sparkSysfs writes the node's simulated sysfs under root/sys for its HCAs (n.HCAs: a
// spark's two rails, a triangle's or ring's two ports), as the kernel lays it out for RoCE HCAs (the files tpdeploy's probe and libibverbs read), and the HCAs' verbs
// device nodes under root/dev/infiniband. The lab's host has no RDMA driver, so each
// uverbsN is a character device with /dev/null's numbers (1:3): what matters to the
// model is that the agent must map it for a container to see it.
func (l *Lab) sparkSysfs(ctx context.Context, n Node, root string) error {
	sys := filepath.Join(root, "sys")
	write := func(rel, data string) error {
		p := filepath.Join(sys, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(data), 0o644)
	}
	if err := os.MkdirAll(filepath.Join(root, "dev/infiniband"), 0o755); err != nil {
		return err
	}
	for _, h := range n.HCAs {
		iface, err := l.Iface(ctx, n.Name, h.Network)
		if err != nil {
			return err
		}
		port := filepath.Join("class/infiniband", h.HCA, "ports/1")
		for rel, data := range map[string]string{
			port + "/state":             "4: ACTIVE\n",
			port + "/phys_state":        "5: LinkUp\n",
			port + "/rate":              "100 Gb/sec (4X EDR)\n",
			port + "/link_layer":        "Ethernet\n",
			port + "/gid_attrs/ndevs/0": iface + "\n",
			filepath.Join("class/infiniband", h.HCA, "device/infiniband_verbs", h.UVerbs, "ibdev"): h.HCA + "\n",
			filepath.Join("class/infiniband_verbs", h.UVerbs, "ibdev"):                             h.HCA + "\n",
			filepath.Join("class/net", iface, "speed"):                                             fmt.Sprint(sparkRateMbps) + "\n",
		} {
			if err := write(rel, data); err != nil {
				return fmt.Errorf("lab sysfs for %s: %w", n.Name, err)
			}
		}
		dev := filepath.Join(root, "dev/infiniband", h.UVerbs)
		_ = os.Remove(dev)
		if err := unix.Mknod(dev, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			return fmt.Errorf("lab device %s for %s: %w", dev, n.Name, err)
		}
	}
	return nil
}
