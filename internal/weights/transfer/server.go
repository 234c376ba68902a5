package transfer

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/confined"
)

// Bounds on the servers one agent keeps, whoever asks for them.
const (
	// MaxServers is how many servers one agent keeps open (one per copy in flight).
	MaxServers = 4
	// DefaultTTL and MaxTTL bound how long a server stays open without a request in
	// flight when its close never arrives.
	DefaultTTL = 5 * time.Minute
	MaxTTL     = time.Hour
	// MaxLifetime closes a server however busy it is kept (and forgets a key).
	MaxLifetime = 12 * time.Hour
	// MaxPeers bounds the keys and the peer addresses of one server (a cluster's nodes).
	MaxPeers = 64
	// MaxConnsPerPeer bounds the connections one peer address holds open at once (a copy
	// opens one per file it fetches at once, Copy.Parallel, clipped to this), and all
	// addresses that are no peer together as many; one more is closed at accept.
	MaxConnsPerPeer = 16
)

// idleTimeout closes a connection idle between requests (HTTP keep-alive): without it a
// peer, or what runs on a compromised one, could hold the agent's sockets for the
// server's life. A variable for the test.
var idleTimeout = time.Minute

// ErrFull is an Open refused because MaxServers are open.
var ErrFull = fmt.Errorf("%d model servers are open, the most an agent keeps", MaxServers)

// Servers are one agent's open model servers, by ID.
type Servers struct {
	mu sync.Mutex
	m  map[string]*server
}

// Serve is what a server serves, and where.
type Serve struct {
	// Listener is on the node's planned address; the server closes it.
	Listener net.Listener
	// Dir is the allowed mount the files are beneath and Rel the model's directory in it:
	// every file is opened by the kernel beneath Dir. The server closes Dir.
	Dir *confined.Dir
	Rel string
	// Files are the names, relative to Rel, the server serves; nothing else is.
	Files []string
	// Relay are the files of Files this node is itself receiving while it serves them (a
	// copy chain's relay, weights.Chain), with their sizes: one not in place yet is
	// served from its partial copy as it grows, and its last byte only once the copy has
	// verified the file and placed it (relay.go). A corrupt file never leaves the node
	// whole.
	Relay map[string]int64
	// Placed is where this agent's copies record the files they verified (required with
	// Relay).
	Placed *Placed
	// Keys are the hex SHA-256s of the secrets the server accepts as a bearer token (the
	// copies' keys, KeyHash); Peers the addresses it accepts requests from (the nodes
	// being served). A request needs both.
	Keys  []string
	Peers []netip.Addr
	// TTL closes the server after this long without a request in flight (DefaultTTL when
	// zero, at most MaxTTL).
	TTL time.Duration
	// Node names this node in answers.
	Node string
	Log  *zap.Logger
}

// server serves a fixed list of files over HTTP with Range support.
type server struct {
	owner    *Servers
	node, id string
	keys     [][sha256.Size]byte
	peers    []netip.Addr
	dir      *confined.Dir
	rel      string
	files    map[string]bool
	relay    map[string]int64
	placed   *Placed
	ttl      time.Duration
	deadline time.Time
	srv      *http.Server
	// ln is the listener srv serves; Close closes it itself, as srv.Close does not when
	// Serve has not started on it yet.
	ln  net.Listener
	log *zap.Logger
	// served counts the bytes of file content written to clients.
	served atomic.Int64

	mu     sync.Mutex
	active int
	last   time.Time
	timer  *time.Timer
	closed bool
}

// Open starts serving s (GET /<name>, with Range, to a peer presenting a key's secret) and
// returns the server's ID, which closes it and opens nothing: it is no secret. The server
// closes on Close, or by itself after its TTL without a request in flight. On an error,
// s's listener and directory are closed.
func (ss *Servers) Open(s Serve) (string, error) {
	keys, err := parseKeys(s.Keys, s.Peers)
	var id string
	if err == nil {
		id, err = newID()
	}
	if err != nil {
		_ = s.Listener.Close()
		_ = s.Dir.Close()
		return "", err
	}
	ttl := s.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	ttl = min(ttl, MaxTTL)
	files := make(map[string]bool, len(s.Files))
	for _, f := range s.Files {
		files[f] = true
	}
	log := s.Log
	if log == nil {
		log = zap.NewNop()
	}
	now := time.Now()
	peers := make([]netip.Addr, len(s.Peers))
	for i, p := range s.Peers {
		peers[i] = p.Unmap()
	}
	for name := range s.Relay {
		if !files[name] || s.Placed == nil {
			_ = s.Listener.Close()
			_ = s.Dir.Close()
			return "", fmt.Errorf("relayed file %s is not one the server serves, or no copy records what it placed", name)
		}
	}
	srv := &server{owner: ss, node: s.Node, id: id, keys: keys, peers: peers, dir: s.Dir, rel: s.Rel, files: files, relay: s.Relay, placed: s.Placed, ttl: ttl, last: now,
		deadline: now.Add(MaxLifetime), ln: s.Listener, log: log}
	lim := &limitListener{Listener: s.Listener, peers: peers, conns: map[netip.Addr]int{}, open: map[net.Conn]netip.Addr{}}
	srv.srv = &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout, ConnState: lim.state}
	ss.mu.Lock()
	if len(ss.m) >= MaxServers {
		ss.mu.Unlock()
		_ = s.Listener.Close()
		_ = s.Dir.Close()
		return "", ErrFull
	}
	if ss.m == nil {
		ss.m = map[string]*server{}
	}
	ss.m[id] = srv
	srv.mu.Lock() // expire reads the timer
	srv.timer = time.AfterFunc(ttl, srv.expire)
	srv.mu.Unlock()
	ss.mu.Unlock()
	go func() { _ = srv.srv.Serve(lim) }()
	log.Info("model server open", zap.Stringer("addr", s.Listener.Addr()), zap.String("root", s.Dir.Path(s.Rel)),
		zap.Int("files", len(files)), zap.Int("keys", len(keys)), zap.Stringers("peers", peers), zap.Duration("ttl", ttl))
	return id, nil
}

// parseKeys checks a server's keys and peers: at least one of each, at most MaxPeers, each
// key a hex SHA-256.
func parseKeys(hashes []string, peers []netip.Addr) ([][sha256.Size]byte, error) {
	switch {
	case len(hashes) == 0 || len(peers) == 0:
		return nil, errors.New("a model server needs the keys and the addresses of the nodes it serves")
	case len(hashes) > MaxPeers || len(peers) > MaxPeers:
		return nil, fmt.Errorf("%d keys and %d peers: at most %d of each", len(hashes), len(peers), MaxPeers)
	}
	keys := make([][sha256.Size]byte, len(hashes))
	for i, h := range hashes {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("key %q is not a hex SHA-256", h)
		}
		keys[i] = [sha256.Size]byte(b)
	}
	for _, p := range peers {
		if !p.IsValid() {
			return nil, errors.New("a peer address is empty")
		}
	}
	return keys, nil
}

// Close closes the server of an ID and reports whether one was open; an unknown ID
// (already closed, expired, or lost with an agent restart) is not an error.
func (ss *Servers) Close(id string) bool {
	ss.mu.Lock()
	s, ok := ss.m[id]
	if ok {
		// The port refuses before Stats stops reporting the server, and whether or not
		// Serve has started on it: no connection waits in a closed server's backlog.
		delete(ss.m, id)
		_ = s.ln.Close()
	}
	ss.mu.Unlock()
	if !ok {
		return false
	}
	s.mu.Lock()
	s.closed = true
	s.timer.Stop()
	s.mu.Unlock()
	_ = s.srv.Close()
	_ = s.dir.Close()
	s.log.Info("model server closed", zap.Int64("served_bytes", s.served.Load()))
	return true
}

// Len is how many servers are open.
func (ss *Servers) Len() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.m)
}

// Stats is what an open server has done.
type Stats struct {
	// Served is the bytes of file content written to clients.
	Served int64
	// Active is the requests in flight.
	Active int
}

// Stats reports on the server of an ID, if it is open.
func (ss *Servers) Stats(id string) (Stats, bool) {
	ss.mu.Lock()
	s, ok := ss.m[id]
	ss.mu.Unlock()
	if !ok {
		return Stats{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Served: s.served.Load(), Active: s.active}, true
}

func newID() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("model server id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// expire closes the server once it has been idle for its TTL.
func (s *server) expire() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	left := time.Until(s.deadline)
	if s.active > 0 && left > 0 {
		s.timer.Reset(min(s.ttl, left))
		s.mu.Unlock()
		return
	}
	if idle := time.Since(s.last); idle < s.ttl && left > 0 {
		s.timer.Reset(min(s.ttl-idle, left))
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.owner.Close(s.id)
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Only a planned peer's request with a key's secret keeps the server open: anyone else
	// who reaches the address must not hold it past its TTL.
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err != nil || !slices.Contains(s.peers, ap.Addr().Unmap()) {
		http.Error(w, "not served to "+r.RemoteAddr+": not a planned peer's address", http.StatusForbidden)
		return
	}
	secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !accepts(s.keys, secret) {
		http.Error(w, "unknown key", http.StatusUnauthorized)
		return
	}
	s.mu.Lock()
	s.active++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active--
		s.last = time.Now()
		s.mu.Unlock()
	}()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, "/")
	if !s.files[name] {
		http.Error(w, "not served here: "+name, http.StatusForbidden)
		return
	}
	// Links are followed only while they stay beneath the allowed mount (a snapshot's
	// ../../blobs/<hash>); a planted config.json -> /etc/passwd is refused.
	path := filepath.Join(s.rel, filepath.FromSlash(name))
	if size, ok := s.relay[name]; ok && !s.placed.Has(s.dir.Path(path)) {
		// What is at the path now is not verified yet (absent, or the content this copy
		// replaces): forward the partial copy as it arrives.
		if r.Method != http.MethodGet || !s.serveRelay(w, r, name, size) {
			if r.Method != http.MethodGet {
				http.Error(w, name+" is still arriving on "+s.node, http.StatusConflict)
			}
			return
		}
	}
	f, err := s.dir.OpenBeneath(path)
	if errors.Is(err, fs.ErrNotExist) {
		http.Error(w, "no "+name+" on "+s.node, http.StatusNotFound)
		return
	}
	if errors.Is(err, confined.ErrNotRegular) {
		http.Error(w, "not served here: "+name+" is not a regular file", http.StatusForbidden)
		return
	}
	if confined.IsRefusal(err) {
		s.log.Warn("model server refused a file that leads outside its directory", zap.String("file", name), zap.Error(err))
		http.Error(w, "not served here: "+name+" leads outside the model's directory", http.StatusForbidden)
		return
	}
	if err != nil {
		http.Error(w, "cannot open "+name+" on "+s.node, http.StatusInternalServerError)
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		http.Error(w, "no "+name+" on "+s.node, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(countingWriter{w, &s.served}, r, "", time.Time{}, f)
}

// countingWriter counts the body bytes written; it keeps ReadFrom, so the file still goes
// out with sendfile.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c countingWriter) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(c.ResponseWriter, r)
	c.n.Add(n)
	return n, err
}

// limitListener accepts at most MaxConnsPerPeer connections at once of each peer, and as
// many of all other addresses together (the handler answers those 403, naming the address
// for the operator); one over the cap is closed before any HTTP is read. It hands the server the accepted
// connection itself (a *net.TCPConn keeps sendfile); the server's ConnState says when
// one ends.
type limitListener struct {
	net.Listener
	peers []netip.Addr

	mu    sync.Mutex
	conns map[netip.Addr]int
	open  map[net.Conn]netip.Addr
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ap, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		a := ap.Addr().Unmap()
		if !slices.Contains(l.peers, a) {
			a = netip.Addr{} // every other address together: each is answered 403 naming it
		}
		l.mu.Lock()
		if l.conns[a] >= MaxConnsPerPeer {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.conns[a]++
		l.open[c] = a
		l.mu.Unlock()
		return c, nil
	}
}

// state releases a connection's place when the server is done with it.
func (l *limitListener) state(c net.Conn, st http.ConnState) {
	if st != http.StateClosed && st != http.StateHijacked {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if a, ok := l.open[c]; ok {
		delete(l.open, c)
		if l.conns[a]--; l.conns[a] <= 0 {
			delete(l.conns, a)
		}
	}
}
