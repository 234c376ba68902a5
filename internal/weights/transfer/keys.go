package transfer

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"sync"
	"time"
)

// A copy's key keeps the model server's secret out of workflow history. The node that
// copies makes a random secret and keeps it in memory (Keys); the workflow carries only
// its SHA-256 (KeyHash), to the server, which accepts a request whose bearer secret hashes
// to one of the keys it was given, and back to the copy, which presents the secret it
// kept. Whoever reads the history — the hashes, the server's address and ID — has nothing
// a server accepts; a restarted agent has lost its secrets, and its copy starts over with
// a new key.

// MaxKeys bounds the keys one agent keeps (one per copy it receives, two per open server
// an agent may be served by).
const MaxKeys = 2 * MaxServers

// ErrKeysFull is a New refused because MaxKeys are kept.
var ErrKeysFull = fmt.Errorf("%d copy keys are kept, the most an agent keeps", MaxKeys)

// KeyHash is the hex SHA-256 of a secret: what a server accepts and history carries.
func KeyHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Keys are the secrets one agent's copies present to model servers, by their hash. A key
// is forgotten after its TTL unused (a copy that holds it keeps it), MaxLifetime after it
// was made however busy, or when its copy is done.
type Keys struct {
	mu sync.Mutex
	m  map[string]*key
}

type key struct {
	secret   string
	ttl      time.Duration
	last     time.Time // made, or last released by a copy
	deadline time.Time
	held     int
}

func (k *key) expired(now time.Time) bool {
	return now.After(k.deadline) || k.held == 0 && now.Sub(k.last) > k.ttl
}

// New makes a key forgotten after ttl unused (DefaultTTL when zero, at most MaxTTL) and
// returns its hash.
func (ks *Keys) New(ttl time.Duration) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("copy key: %w", err)
	}
	secret := hex.EncodeToString(b)
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	now := time.Now()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.expire(now)
	if len(ks.m) >= MaxKeys {
		return "", ErrKeysFull
	}
	if ks.m == nil {
		ks.m = map[string]*key{}
	}
	h := KeyHash(secret)
	ks.m[h] = &key{secret: secret, ttl: min(ttl, MaxTTL), last: now, deadline: now.Add(MaxLifetime)}
	return h, nil
}

// Take returns the secret of a key for a copy, kept until release; false when there is no
// such key (never made here, expired, or made by an agent that restarted since).
func (ks *Keys) Take(hash string) (secret string, release func(), ok bool) {
	now := time.Now()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.expire(now)
	k, ok := ks.m[hash]
	if !ok {
		return "", nil, false
	}
	k.held++
	var once sync.Once
	return k.secret, func() {
		once.Do(func() {
			ks.mu.Lock()
			defer ks.mu.Unlock()
			k.held--
			k.last = time.Now()
		})
	}, true
}

// Forget drops a key: its copy is done.
func (ks *Keys) Forget(hash string) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	delete(ks.m, hash)
}

// Len is how many keys are kept.
func (ks *Keys) Len() int {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.expire(time.Now())
	return len(ks.m)
}

func (ks *Keys) expire(now time.Time) {
	for h, k := range ks.m {
		if k.expired(now) {
			delete(ks.m, h)
		}
	}
}

// accepts says whether secret hashes to one of hashes (each hex SHA-256).
func accepts(hashes [][sha256.Size]byte, secret string) bool {
	sum := sha256.Sum256([]byte(secret))
	ok := 0
	for _, h := range hashes {
		ok |= subtle.ConstantTimeCompare(sum[:], h[:])
	}
	return ok == 1
}
