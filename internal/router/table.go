package router

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"
)

// Why Acquire gave no replica.
var (
	// ErrUnknownModel: no route has the model (404 model_not_found).
	ErrUnknownModel = errors.New("unknown model")
	// ErrQueueFull: the model has no replica to take the request and its hold queue is at
	// its bound (503 with Retry-After).
	ErrQueueFull = errors.New("hold queue full")
	// ErrHoldTimeout: the request was held for the whole hold and no replica came (503
	// with Retry-After).
	ErrHoldTimeout = errors.New("no replica within the hold")
	// ErrUnknownReplica: Drain named a replica no route has.
	ErrUnknownReplica = errors.New("unknown replica")
	// ErrUnconfirmed: every replica of the model is Unconfirmed (from an older router's
	// state file); none serves until its cluster pushes its route again (503 at once).
	ErrUnconfirmed = errors.New("route not confirmed since the router's upgrade: its cluster's next deploy pushes it again")
)

// Table is the routes' live state: per replica its requests outstanding, whether it may
// take new ones, and the requests held per model. Its methods are safe for concurrent use.
type Table struct {
	mu     sync.Mutex
	models map[string]*model
	routes Routes
	// next rotates where the least-outstanding scan starts, so replicas tied at the least
	// share the requests instead of the first taking them all.
	next int
	// MaxHeld bounds the requests held per model; 0 holds none (refuses at once).
	maxHeld int
	now     func() time.Time
}

type model struct {
	id       string
	replicas []*replica
	// changed is closed (and replaced) whenever a replica may have become available, to
	// wake the held requests.
	changed chan struct{}
	held    int
}

type replica struct {
	model, name string
	url         *url.URL
	key         string
	keySum      [32]byte
	down        bool
	draining    bool
	unconfirmed bool
	outstanding int
	// ejectedUntil: a dial to the replica failed (its engine is gone or restarting); it gets
	// no request until then, though its supervisor has not marked it down yet.
	ejectedUntil time.Time
	// idle are Drain's waiters, closed when outstanding reaches 0.
	idle []chan struct{}
}

// NewTable makes an empty table holding at most maxHeld requests per model.
func NewTable(maxHeld int) *Table {
	return &Table{models: map[string]*model{}, maxHeld: maxHeld, now: time.Now}
}

// Set replaces the routes. A replica kept (same model, name and URL) keeps its outstanding
// count and its waiters; its down and draining flags are the new routes'. A replica dropped
// keeps serving the requests it has until they end. Held requests of a model that is gone
// are answered ErrUnknownModel.
func (t *Table) Set(r Routes) error {
	if err := r.Validate(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.models
	t.models = make(map[string]*model, len(r.Models))
	for _, m := range r.Models {
		nm := old[m.ID]
		if nm == nil {
			nm = &model{id: m.ID, changed: make(chan struct{})}
		}
		prev := map[string]*replica{}
		for _, rep := range nm.replicas {
			prev[rep.name+"\x00"+rep.url.String()] = rep
		}
		nm.replicas = nm.replicas[:0:0]
		for _, rr := range m.Replicas {
			u, _ := url.Parse(rr.URL) // Validate parsed it
			u.Path = ""
			rep := prev[rr.Name+"\x00"+u.String()]
			if rep == nil {
				rep = &replica{model: m.ID, name: rr.Name, url: u}
			}
			rep.down, rep.draining, rep.unconfirmed = rr.Down, rr.Draining, rr.Unconfirmed
			rep.key, rep.keySum = rr.Key, sha256.Sum256([]byte(rr.Key))
			nm.replicas = append(nm.replicas, rep)
		}
		t.models[m.ID] = nm
		nm.wake()
	}
	for id, m := range old {
		if t.models[id] == nil {
			m.wake()
		}
	}
	t.routes = r
	return nil
}

// Routes is the routes last Set, with the draining marks Drain added.
func (t *Table) Routes() Routes {
	t.mu.Lock()
	defer t.mu.Unlock()
	var r Routes
	for _, m := range t.routes.Models {
		cur := t.models[m.ID]
		mm := Model{ID: m.ID}
		for _, rep := range cur.replicas {
			mm.Replicas = append(mm.Replicas, Replica{Name: rep.name, URL: rep.url.String(), Down: rep.down, Draining: rep.draining, Key: rep.key, Unconfirmed: rep.unconfirmed})
		}
		r.Models = append(r.Models, mm)
	}
	return r
}

// Opens is the models a client's key opens (sum: the sha256 of its Bearer token; bearer:
// whether it sent one): a model whose replicas carry keys is opened by one of them; one
// whose replicas carry none is opened by anyone when the router has no keys of its own
// (fleetKeyed false), else by nobody here (the router's own keys, which the caller checks,
// open every model). An Unconfirmed replica counts as keyed by a key no client has. keyed
// says whether any model has a key.
func (t *Table) Opens(sum [32]byte, bearer, fleetKeyed bool) (opens map[string]bool, keyed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	opens = map[string]bool{}
	for id, m := range t.models {
		has, ok := false, 0
		for _, r := range m.replicas {
			switch {
			case r.unconfirmed:
				has = true
			case r.key != "":
				has = true
				ok |= subtle.ConstantTimeCompare(sum[:], r.keySum[:])
			}
		}
		keyed = keyed || has
		if (has && bearer && ok == 1) || (!has && !fleetKeyed) {
			opens[id] = true
		}
	}
	return opens, keyed
}

func (m *model) wake() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Lease is one request's hold on a replica; Release ends it.
type Lease struct {
	t    *Table
	rep  *replica
	once sync.Once
}

// URL is the replica's base URL.
func (l *Lease) URL() *url.URL { return l.rep.url }

// Replica is the replica's name.
func (l *Lease) Replica() string { return l.rep.name }

// Key is the lease's replica's API key (Replica.Key), empty when it has none.
func (l *Lease) Key() string { return l.rep.key }

// Release ends the request on its replica.
func (l *Lease) Release() {
	l.once.Do(func() {
		l.t.mu.Lock()
		defer l.t.mu.Unlock()
		l.rep.outstanding--
		if l.rep.outstanding == 0 {
			for _, c := range l.rep.idle {
				close(c)
			}
			l.rep.idle = nil
		}
	})
}

// Eject keeps the lease's replica from new requests for d: its connection failed. Held
// requests are woken when it ends.
func (l *Lease) Eject(d time.Duration) {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	l.rep.ejectedUntil = l.t.now().Add(d)
}

// Held says how Acquire went for a request that had to wait.
type Held struct {
	// Waited is how long the request was held (0: a replica was free at once).
	Waited time.Duration
}

// Acquire gives the request a replica of the model: the available one (not down, not
// draining, not ejected) with the fewest requests outstanding. When the model has none,
// the request is held until one comes, deadline passes (ErrHoldTimeout) or ctx ends; a
// model already holding its bound is refused at once (ErrQueueFull).
func (t *Table) Acquire(ctx context.Context, modelID string, deadline time.Time) (*Lease, Held, error) {
	start := t.now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	counted := false
	var m *model
	t.mu.Lock()
	defer func() {
		if counted && m != nil {
			m.held--
		}
		t.mu.Unlock()
	}()
	for {
		m = t.models[modelID]
		if m == nil {
			return nil, Held{Waited: t.now().Sub(start)}, fmt.Errorf("model %q: %w", modelID, ErrUnknownModel)
		}
		now := t.now()
		rep, nextEject := m.pick(now, t.next)
		t.next++
		if rep == nil && m.unconfirmed() {
			// Not a swap: nothing will come within a hold.
			return nil, Held{Waited: now.Sub(start)}, fmt.Errorf("model %q: %w", modelID, ErrUnconfirmed)
		}
		if rep != nil {
			rep.outstanding++
			waited := time.Duration(0)
			if counted {
				waited = now.Sub(start)
			}
			return &Lease{t: t, rep: rep}, Held{Waited: waited}, nil
		}
		if !counted {
			if m.held >= t.maxHeld {
				return nil, Held{}, fmt.Errorf("model %q: %d requests held already: %w", modelID, m.held, ErrQueueFull)
			}
			m.held++
			counted = true
		}
		if !now.Before(deadline) {
			return nil, Held{Waited: now.Sub(start)}, fmt.Errorf("model %q: held %s: %w", modelID, now.Sub(start).Round(time.Millisecond), ErrHoldTimeout)
		}
		wake := deadline
		if !nextEject.IsZero() && nextEject.Before(wake) {
			wake = nextEject
		}
		if timer == nil {
			timer = time.NewTimer(wake.Sub(now))
		} else {
			timer.Reset(wake.Sub(now))
		}
		changed := m.changed
		t.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
		case <-ctx.Done():
			t.mu.Lock()
			return nil, Held{Waited: t.now().Sub(start)}, ctx.Err()
		}
		t.mu.Lock()
		if m2 := t.models[modelID]; m2 != m && m2 != nil {
			// The model was dropped and listed again: the count moves with the request.
			m.held--
			m2.held++
		}
	}
}

// pick is the available replica with the fewest outstanding, the scan starting at start
// (mod n) so that ties rotate; when none is available, the earliest end of an ejection.
func (m *model) pick(now time.Time, start int) (*replica, time.Time) {
	var best *replica
	var nextEject time.Time
	n := len(m.replicas)
	for i := range n {
		rep := m.replicas[(start+i)%n]
		if rep.down || rep.draining || rep.unconfirmed {
			continue
		}
		if now.Before(rep.ejectedUntil) {
			if nextEject.IsZero() || rep.ejectedUntil.Before(nextEject) {
				nextEject = rep.ejectedUntil
			}
			continue
		}
		if best == nil || rep.outstanding < best.outstanding {
			best = rep
		}
	}
	return best, nextEject
}

// unconfirmed says whether the model has replicas and every one is Unconfirmed.
func (m *model) unconfirmed() bool {
	for _, r := range m.replicas {
		if !r.unconfirmed {
			return false
		}
	}
	return len(m.replicas) > 0
}

// Drain marks the replica draining (no new requests) and waits until its requests in
// flight have ended or ctx ends. It is what the supervisor calls before it stops the
// replica's engine. Requests of the model then go to its other replicas, or are held when
// it has none.
func (t *Table) Drain(ctx context.Context, modelID, name string) error {
	t.mu.Lock()
	var rep *replica
	if m := t.models[modelID]; m != nil {
		for _, r := range m.replicas {
			if r.name == name {
				rep = r
			}
		}
	}
	if rep == nil {
		t.mu.Unlock()
		return fmt.Errorf("model %q replica %q: %w", modelID, name, ErrUnknownReplica)
	}
	rep.draining = true
	if rep.outstanding == 0 {
		t.mu.Unlock()
		return nil
	}
	idle := make(chan struct{})
	rep.idle = append(rep.idle, idle)
	t.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		t.mu.Lock()
		left := rep.outstanding
		t.mu.Unlock()
		return fmt.Errorf("model %q replica %q: %d requests still in flight: %w", modelID, name, left, ctx.Err())
	}
}

// ReplicaState is one replica's state, for metrics and the admin API.
type ReplicaState struct {
	Model, Name, URL string
	Outstanding      int
	Available        bool
	Down, Draining   bool
	// Unconfirmed: from an older router's state file, not pushed since (Replica.Unconfirmed).
	Unconfirmed bool `json:",omitempty"`
}

// ModelState is a model's replicas and its held requests.
type ModelState struct {
	ID       string
	Held     int
	Replicas []ReplicaState
}

// State is every model's state, in the routes' order.
func (t *Table) State() []ModelState {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var out []ModelState
	for _, id := range t.routes.IDs() {
		m := t.models[id]
		ms := ModelState{ID: id, Held: m.held}
		for _, r := range m.replicas {
			ms.Replicas = append(ms.Replicas, ReplicaState{Model: id, Name: r.name, URL: r.url.String(), Outstanding: r.outstanding,
				Available: !r.down && !r.draining && !r.unconfirmed && !now.Before(r.ejectedUntil), Down: r.down, Draining: r.draining, Unconfirmed: r.unconfirmed})
		}
		out = append(out, ms)
	}
	return out
}
