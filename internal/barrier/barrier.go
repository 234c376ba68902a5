// Package barrier holds chosen activities of a lab node's agent before they run, so a
// test can inject a fault at an exact step of a deploy (the fault matrix) instead of racing
// a phase that lasts milliseconds. Only a lab build of the agent has it (`go build -tags
// lab ./worker`, as lab.BuildImages builds the node image), and it is on only when that
// agent is given a directory (TPDEPLOY_LAB_BARRIER_DIR, set by the lab). A production
// agent does not link this package, so no environment can switch it on.
//
// A file named after an activity type in that directory holds the activity: the agent
// writes NAME.reached (holding the attempt number) and waits until NAME is removed, or the
// activity is cancelled or times out.
package barrier

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
)

// EnvDir names the directory that turns barriers on.
const EnvDir = "TPDEPLOY_LAB_BARRIER_DIR"

// Interceptor is the worker interceptor that holds activities at their barrier files.
type Interceptor struct {
	interceptor.WorkerInterceptorBase
	Dir string
}

// InterceptActivity implements interceptor.WorkerInterceptor.
func (b *Interceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &inbound{dir: b.Dir}
	i.Next = next
	return i
}

type inbound struct {
	interceptor.ActivityInboundInterceptorBase
	dir string
}

func (i *inbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	info := activity.GetInfo(ctx)
	if err := Wait(ctx, i.dir, info.ActivityType.Name, int(info.Attempt)); err != nil {
		return nil, err
	}
	return i.Next.ExecuteActivity(ctx, in)
}

// Wait holds while dir/name exists, after writing dir/name.reached.
func Wait(ctx context.Context, dir, name string, attempt int) error {
	hold := filepath.Join(dir, name)
	if _, err := os.Stat(hold); err != nil {
		return nil
	}
	_ = os.WriteFile(hold+".reached", []byte(strconv.Itoa(attempt)), 0o644)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if _, err := os.Stat(hold); errors.Is(err, os.ErrNotExist) {
				return nil
			}
		}
	}
}

// Hold installs the barrier for activity name in dir; a stale reached mark is removed.
func Hold(dir, name string) error {
	_ = os.Remove(filepath.Join(dir, name+".reached"))
	return os.WriteFile(filepath.Join(dir, name), nil, 0o644)
}

// Reached says whether an activity has arrived at the barrier for name.
func Reached(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name+".reached"))
	return err == nil
}

// Release lets held and later activities of name go on.
func Release(dir, name string) error {
	err := os.Remove(filepath.Join(dir, name))
	_ = os.Remove(filepath.Join(dir, name+".reached"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
