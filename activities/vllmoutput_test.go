package activities

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/client"
)

// scriptExec is an engine whose exec runs the agent's shell script here, with vLLM's
// directory at dir, and multiplexes its output as Docker does.
type scriptExec struct {
	containerEngine
	dir string
	cmd *[]string
}

func (e scriptExec) ExecCreate(_ context.Context, _ string, o client.ExecCreateOptions) (client.ExecCreateResult, error) {
	*e.cmd = o.Cmd
	return client.ExecCreateResult{ID: "x"}, nil
}

func (e scriptExec) ExecAttach(context.Context, string, client.ExecAttachOptions) (client.ExecAttachResult, error) {
	args := append([]string(nil), *e.cmd...)
	args[2] = strings.Replace(args[2], "d="+vllmDir, "d="+e.dir, 1)
	var out, errOut bytes.Buffer
	c := exec.Command(args[0], args[1:]...)
	c.Stdout, c.Stderr = &out, &errOut
	if err := c.Run(); err != nil {
		return client.ExecAttachResult{}, err
	}
	mine, theirs := net.Pipe()
	go func() {
		defer theirs.Close()
		for _, f := range []struct {
			stream byte
			b      []byte
		}{{1, out.Bytes()}, {2, errOut.Bytes()}} {
			for b := f.b; len(b) > 0; {
				n := min(len(b), 32<<10)
				hdr := [8]byte{f.stream}
				binary.BigEndian.PutUint32(hdr[4:], uint32(n))
				if _, err := theirs.Write(append(hdr[:], b[:n]...)); err != nil {
					return
				}
				b = b[n:]
			}
		}
	}()
	return client.ExecAttachResult{HijackedResponse: client.NewHijackedResponse(mine, "")}, nil
}

func (e scriptExec) ExecInspect(context.Context, string, client.ExecInspectOptions) (client.ExecInspectResult, error) {
	return client.ExecInspectResult{}, nil
}

// A line longer than maxLine is delivered once, whole up to maxLine and marked as
// truncated with its length; one longer than a whole read likewise, and its rest is not
// delivered as a line of its own. A partial last line waits for its newline.
func TestVLLMOutputDeliversLongLinesMarkedNotCut(t *testing.T) {
	dir := t.TempDir()
	long, huge := strings.Repeat("a", 300<<10), strings.Repeat("b", maxRead+maxRead/2)
	log := "short\n" + long + "\n" + huge + "\nafter\npartial"
	if err := os.WriteFile(filepath.Join(dir, "log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmd []string
	out := vllmOutput{eng: scriptExec{dir: dir, cmd: &cmd}, container: "c"}
	var got []string
	offset := int64(0)
	for i := 0; i < 10; i++ {
		lines, next, _, err := out.read(context.Background(), offset)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, lines...)
		if next == offset {
			break
		}
		offset = next
	}
	want := []string{
		"short",
		long[:maxLine] + fmt.Sprintf(truncationMark, maxLine, fmt.Sprint(len(long))),
		huge[:maxLine] + fmt.Sprintf(truncationMark, maxLine, fmt.Sprintf("more than %d", maxRead)),
		"after",
	}
	if offset != int64(len(log)-len("partial")) {
		t.Errorf("offset %d, want %d (before the partial line)", offset, len(log)-len("partial"))
	}
	if len(got) != len(want) {
		short := make([]string, len(got))
		for i, l := range got {
			short[i] = fmt.Sprintf("%d bytes %.12q…%q", len(l), l, l[max(0, len(l)-60):])
		}
		t.Fatalf("%d lines, want %d: %v", len(got), len(want), short)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %d bytes ending %q, want %d ending %q", i, len(got[i]), got[i][max(0, len(got[i])-60):], len(want[i]), want[i][len(want[i])-60:])
		}
	}
}
