package activities

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/raygcs"
)

// errNoGCSAddress is a request without the head's GCS address.
var errNoGCSAddress = errors.New("no Ray GCS address in the plan")

// registeredNodes reads Ray's nodes from the GCS at the plan's Ray address, from the
// agent's own network namespace.
func (a *Node) registeredNodes(ctx context.Context, gcsAddr string) ([]contract.RegisteredNode, error) {
	if gcsAddr == "" {
		return nil, errNoGCSAddress
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		var c net.Conn
		err := a.inNetNS(func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, "tcp", addr)
			return err
		})
		return c, err
	}
	return raygcs.Nodes(ctx, gcsAddr, dial)
}
