package activities

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/moby/moby/client"
)

// rayStatus is what `ray status` reports: it names nodes by ID only (no addresses), so it
// cannot prove placement, but it says how many nodes are up, the GPUs, and what is pending.
type rayStatus struct {
	Active    int
	GPUsUsed  float64
	GPUsTotal float64
	Demands   []string
}

func (s rayStatus) String() string {
	out := fmt.Sprintf("%d active nodes, %g/%g GPUs in use", s.Active, s.GPUsUsed, s.GPUsTotal)
	if len(s.Demands) > 0 {
		out += "; pending: " + strings.Join(s.Demands, "; ")
	}
	return out
}

var usageGPU = regexp.MustCompile(`^\s*([0-9.]+)/([0-9.]+) GPU\b`)

// parseRayStatus reads `ray status` in the autoscaler v2 format (`Total Usage:`, `Total
// Demands:`) and the older one (`Usage:`, `Demands:`, `Healthy:`).
func parseRayStatus(text string) (rayStatus, error) {
	var s rayStatus
	section := ""
	seenHeader := false
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch trimmed {
		case "Active:", "Healthy:":
			section, seenHeader = "nodes", true
			continue
		case "Pending:", "Recent failures:", "Total Constraints:", "Resources", "Node status":
			section = ""
			continue
		case "Total Usage:", "Usage:":
			section, seenHeader = "usage", true
			continue
		case "Total Demands:", "Demands:":
			section, seenHeader = "demands", true
			continue
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "---") || strings.HasPrefix(trimmed, "=====") || strings.HasPrefix(trimmed, "(") {
			continue
		}
		switch section {
		case "nodes":
			if n, _, ok := strings.Cut(trimmed, " "); ok {
				if k, err := strconv.Atoi(n); err == nil {
					s.Active += k
				}
			}
		case "usage":
			if m := usageGPU.FindStringSubmatch(line); m != nil {
				s.GPUsUsed, _ = strconv.ParseFloat(m[1], 64)
				s.GPUsTotal, _ = strconv.ParseFloat(m[2], 64)
			}
		case "demands":
			s.Demands = append(s.Demands, trimmed)
		}
	}
	if !seenHeader {
		return s, fmt.Errorf("not ray status output: %.80q", text)
	}
	return s, nil
}

// execRayStatus runs `ray status` in the head's Ray container.
func execRayStatus(ctx context.Context, eng containerEngine, container string) (rayStatus, error) {
	ex, err := eng.ExecCreate(ctx, container, client.ExecCreateOptions{Cmd: []string{"ray", "status"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return rayStatus{}, err
	}
	att, err := eng.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return rayStatus{}, err
	}
	out, errOut, err := readExecOutput(ctx, att)
	if err != nil {
		return rayStatus{}, err
	}
	s, err := parseRayStatus(out)
	if err != nil && errOut != "" {
		return s, fmt.Errorf("ray status: %s", clipLine(strings.TrimSpace(errOut)))
	}
	return s, err
}
