package activities

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/client"
)

// maxLine bounds one delivered line; longer lines are cut, never split into two.
const maxLine = 256 << 10

// logLine is one complete line of a container's output.
type logLine struct {
	Time   time.Time
	Stderr bool
	Text   string
}

// logCursor is where a follow stopped: the last line's timestamp and how many lines had
// exactly that timestamp. Docker's `since` is inclusive, so a resumed follow skips that
// many lines at that timestamp and neither loses nor repeats a line.
type logCursor struct {
	Since time.Time
	Seen  int
}

func (c *logCursor) advance(t time.Time) {
	if t.Equal(c.Since) {
		c.Seen++
		return
	}
	c.Since, c.Seen = t, 1
}

// followLogs streams a container's stdout and stderr from cursor, calling fn per complete
// line, until ctx ends, the container's output ends (it stopped), or fn fails. It returns
// the cursor after the last line handed to fn.
func followLogs(ctx context.Context, eng containerEngine, id string, cur logCursor, fn func(logLine) error) (logCursor, error) {
	opts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true, Follow: true}
	if !cur.Since.IsZero() {
		opts.Since = fmt.Sprintf("%d.%09d", cur.Since.Unix(), cur.Since.Nanosecond())
	}
	rc, err := eng.ContainerLogs(ctx, id, opts)
	if err != nil {
		return cur, err
	}
	defer rc.Close()
	skip := cur
	deliver := func(l logLine) error {
		if l.Time.Before(skip.Since) {
			return nil
		}
		if l.Time.Equal(skip.Since) && skip.Seen > 0 {
			skip.Seen--
			return nil
		}
		// A line handed to fn is consumed, whatever fn returns.
		cur.advance(l.Time)
		return fn(l)
	}
	err = demuxLines(bufio.NewReaderSize(rc, 64<<10), deliver)
	if errors.Is(err, io.EOF) || (err != nil && ctx.Err() != nil) {
		err = nil
	}
	return cur, err
}

// demuxLines reads Docker's multiplexed stream (8-byte frame headers: stream, size) with
// a timestamp in front of every frame. A frame without a final newline is a partial
// message (the engine splits lines over 16 KiB); its continuation frames are joined to it.
func demuxLines(r io.Reader, deliver func(logLine) error) error {
	var hdr [8]byte
	partial := map[byte]*logLine{}
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		size := binary.BigEndian.Uint32(hdr[4:])
		payload := make([]byte, size)
		if _, err := io.ReadFull(r, payload); err != nil {
			return err
		}
		stream := hdr[0]
		ts, text, ok := bytes.Cut(payload, []byte{' '})
		if !ok {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, string(ts))
		if err != nil {
			continue
		}
		complete := bytes.HasSuffix(text, []byte{'\n'})
		text = bytes.TrimSuffix(text, []byte{'\n'})
		l := partial[stream]
		if l == nil {
			l = &logLine{Time: t, Stderr: stream == 2}
		}
		if room := maxLine - len(l.Text); room > 0 {
			l.Text += string(text[:min(len(text), room)])
		}
		if !complete {
			partial[stream] = l
			continue
		}
		delete(partial, stream)
		// One frame may hold several lines when a program writes them in one call.
		for _, part := range bytes.Split([]byte(l.Text), []byte{'\n'}) {
			if err := deliver(logLine{Time: l.Time, Stderr: l.Stderr, Text: string(part)}); err != nil {
				return err
			}
		}
	}
}
