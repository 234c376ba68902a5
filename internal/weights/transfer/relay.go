package transfer

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/confined"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// A copy chain (weights.Chain) has every node but the last forward what it receives to
// the next while it receives the rest: its model server serves a file it is still
// copying from the file's partial copy as it grows. The last byte of such a file is
// released only once this agent's copy has verified the file's hash and put it in place
// (Placed), so the next node never holds a whole file its predecessor found corrupt: a
// corrupt file's partial copy is removed, and the forwarding stops short of its end.

// Placed records the files this agent's copies have verified and put in place (their
// paths on the node), for its relays: a relay releases a file's last byte only once it
// is recorded. A copy records also the files it found in place already (verified by
// hash, or by their blob's name in a Hugging Face cache), so a copy resumed after a
// restart relays them too. It forgets the oldest beyond maxPlaced.
type Placed struct {
	mu    sync.Mutex
	m     map[string]bool
	order []string
	// alive is when a copy last reported it runs (Touch): a relay waits for a file its
	// node's copy has not begun yet only while a copy runs.
	alive time.Time
}

// Touch says that a copy runs (every progress tick).
func (p *Placed) Touch() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.alive = time.Now()
	p.mu.Unlock()
}

// idle is how long since a copy last said it runs.
func (p *Placed) idle() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Since(p.alive)
}

// maxPlaced bounds the paths one agent remembers (a model has hundreds of files).
const maxPlaced = 4 * maxFilesRemembered

// maxFilesRemembered is the files of one copy the agent accepts (activities' maxSyncFiles).
const maxFilesRemembered = 10000

// Mark records a path as verified and in place.
func (p *Placed) Mark(path string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]bool{}
	}
	if p.m[path] {
		return
	}
	if len(p.order) >= maxPlaced {
		delete(p.m, p.order[0])
		p.order = p.order[1:]
	}
	p.m[path] = true
	p.order = append(p.order, path)
}

// Has says whether a path is recorded as verified and in place.
func (p *Placed) Has(path string) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[path]
}

// Relay's timing; variables for the tests.
var (
	// relayPoll is how often a relay looks for more of a file it forwards.
	relayPoll = 5 * time.Millisecond
	// relayWait ends a relayed response when the file has not begun arriving, or stopped
	// growing, for this long (the copying side's stall detection is the same).
	relayWait = stallAfter
	// relayHeaderAfter is how long a relay waits for a file to begin arriving before it
	// sends the response's header anyway (the copy's ResponseHeaderTimeout is 30 s).
	relayHeaderAfter = 10 * time.Second
	// relayGone ends a relayed response this long after its partial copy vanished without
	// the file being placed (the copy found it corrupt and removed it).
	relayGone = 2 * time.Second
)

// serveRelay serves a file this node is still receiving (Serve.Relay): from its partial
// copy as it grows, holding back the last byte until the file is verified and placed. It
// reports placed when the file was placed before any byte was sent: the caller then
// serves the file itself. A response it cannot finish is aborted, so the copy on the
// other end sees a broken transfer, keeps what arrived and asks again from there.
func (s *server) serveRelay(w http.ResponseWriter, r *http.Request, name string, size int64) (placed bool) {
	dest := filepath.Join(s.rel, filepath.FromSlash(name))
	key := s.dir.Path(dest)
	if s.placed.Has(key) {
		return true
	}
	start, ok := relayRange(r.Header.Get("Range"), size)
	if !ok {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		http.Error(w, "range not satisfiable", http.StatusRequestedRangeNotSatisfiable)
		return false
	}
	ctx := r.Context()
	wait := func() bool {
		t := time.NewTimer(relayPoll)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	headers := func() {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(size-start, 10))
		if r.Header.Get("Range") != "" {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, size-1, size))
			w.WriteHeader(http.StatusPartialContent)
		} else {
			w.WriteHeader(http.StatusOK)
		}
		_ = http.NewResponseController(w).Flush()
	}
	// Wait for the copy to begin the file (or to find it in place), however long it takes
	// while a copy runs on this node: it may be busy with files the next node holds. The
	// header goes after relayHeaderAfter, before the client's header timeout; from then
	// on a copy that stops running breaks the response off instead of answering 503.
	var f *os.File
	sent := false
	for since := time.Now(); ; {
		if s.placed.Has(key) {
			if !sent {
				return true
			}
			var err error
			if f, err = s.dir.OpenBeneath(dest); err != nil {
				panic(http.ErrAbortHandler)
			}
			break
		}
		var err error
		f, err = s.dir.OpenFile(dest+weights.PartialSuffix, os.O_RDONLY, 0)
		if err == nil {
			break
		}
		if confined.IsRefusal(err) || errors.Is(err, confined.ErrNotRegular) {
			s.log.Warn("model server refused a partial file it was to relay", zap.String("file", name), zap.Error(err))
			if sent {
				panic(http.ErrAbortHandler)
			}
			http.Error(w, "not served here: "+name+"'s partial copy is not a regular file beneath the model's directory", http.StatusForbidden)
			return false
		}
		if !errors.Is(err, fs.ErrNotExist) {
			if sent {
				panic(http.ErrAbortHandler)
			}
			http.Error(w, "cannot open "+name+" on "+s.node, http.StatusInternalServerError)
			return false
		}
		idle := s.placed.idle() > relayWait
		switch {
		case idle && sent:
			panic(http.ErrAbortHandler)
		case idle && time.Since(since) > relayWait:
			// Retryable for the next node: this node's copy may be retried too.
			http.Error(w, fmt.Sprintf("%s has not begun arriving on %s, and no copy has run there for %s", name, s.node, relayWait), http.StatusServiceUnavailable)
			return false
		case !idle && !sent && time.Since(since) > relayHeaderAfter:
			headers()
			sent = true
		}
		if !wait() {
			return false
		}
	}
	defer f.Close()
	if !sent {
		headers()
	}
	rc := http.NewResponseController(w)
	abort := func(why string) {
		s.log.Warn("model relay stopped", zap.String("file", name), zap.Int64("size", size), zap.String("why", why))
		panic(http.ErrAbortHandler) // the client sees a broken transfer, not an end
	}
	buf := make([]byte, 1<<20)
	pos := start
	lastGrowth := time.Now()
	var goneSince time.Time
	for pos < size {
		st, err := f.Stat()
		if err != nil {
			abort(err.Error())
		}
		// Everything but the last byte goes as it arrives.
		if avail := min(st.Size(), size-1); pos < avail {
			n, err := f.ReadAt(buf[:min(avail-pos, int64(len(buf)))], pos)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return false // the client went away
				}
				_ = rc.Flush()
				s.served.Add(int64(n))
				pos += int64(n)
				lastGrowth = time.Now()
			}
			if err != nil && err != io.EOF {
				abort(err.Error())
			}
			continue
		}
		if pos == size-1 && s.placed.Has(key) {
			// Verified and in place: the last byte, from the placed file itself.
			placedFile, err := s.dir.OpenBeneath(dest)
			if err != nil {
				abort(err.Error())
			}
			_, err = placedFile.ReadAt(buf[:1], size-1)
			placedFile.Close()
			if err != nil {
				abort(err.Error())
			}
			if _, err := w.Write(buf[:1]); err != nil {
				return false
			}
			s.served.Add(1)
			return false
		}
		if _, err := s.dir.Lstat(dest + weights.PartialSuffix); err != nil && !s.placed.Has(key) {
			if goneSince.IsZero() {
				goneSince = time.Now()
			} else if time.Since(goneSince) > relayGone {
				abort("its partial copy was removed before the file was verified (corrupt)")
			}
		} else {
			goneSince = time.Time{}
		}
		if time.Since(lastGrowth) > relayWait {
			abort(fmt.Sprintf("nothing more arrived for %s", relayWait))
		}
		if !wait() {
			return false
		}
	}
	return false
}

// relayRange reads a Range header of the form a copy sends ("bytes=N-"), within size.
func relayRange(h string, size int64) (int64, bool) {
	if h == "" {
		return 0, size > 0
	}
	v, ok := strings.CutPrefix(h, "bytes=")
	if !ok {
		return 0, false
	}
	from, rest, ok := strings.Cut(v, "-")
	if !ok || rest != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(from, 10, 64)
	if err != nil || n < 0 || n >= size {
		return 0, false
	}
	return n, true
}
