package transfer

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"
)

// A key is kept while a copy holds it, however long; released, it is forgotten after its
// TTL unused; forgotten, its hash names nothing.
func TestKeysLiveWhileACopyHoldsThem(t *testing.T) {
	var ks Keys
	h, err := ks.New(10 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	secret, release, ok := ks.Take(h)
	if !ok || KeyHash(secret) != h {
		t.Fatalf("Take(%s) = %q, %v", h, secret, ok)
	}
	time.Sleep(30 * time.Millisecond)
	if _, again, ok := ks.Take(h); !ok {
		t.Fatal("a key held by a copy was forgotten past its TTL")
	} else {
		again()
	}
	release()
	release() // twice is once
	if _, r, ok := ks.Take(h); !ok {
		t.Fatal("a key just released was forgotten")
	} else {
		r()
	}
	time.Sleep(30 * time.Millisecond)
	if _, _, ok := ks.Take(h); ok || ks.Len() != 0 {
		t.Fatalf("a key unused past its TTL is still kept (%d keys)", ks.Len())
	}
}

// The server accepts a secret, never its hash.
func TestAcceptsTheSecretNotItsHash(t *testing.T) {
	var ks Keys
	h, _ := ks.New(0)
	secret, release, _ := ks.Take(h)
	defer release()
	b, _ := hex.DecodeString(h)
	hashes := [][sha256.Size]byte{[sha256.Size]byte(b)}
	if !accepts(hashes, secret) {
		t.Error("the secret is refused")
	}
	for _, v := range []string{h, "", secret + "x"} {
		if accepts(hashes, v) {
			t.Errorf("%q is accepted", v)
		}
	}
}
