// Package intent is the operator's signature on a spec: `starter` signs the canonical JSON
// of the defaulted spec (spec.Cluster.Canonical) with the operator's ed25519 key, the deploy
// carries the signature (contract.Intent) in every request that makes an agent act, and an
// agent whose policy names trusted keys verifies it and acts only on what the signed spec
// says. Encryption (package codec) says "someone holding the key wrote this", and every
// agent holds that key; the signature says "an operator asked for this", and no agent holds
// an operator's private key.
//
// The signed message is a fixed context string, the signing time and the expiry, and the
// spec's bytes, so a signature made for anything else with the same key can never pass
// for a spec's, and neither time can be changed without breaking the signature. A key is
// named by its
// fingerprint (KeyID), derived from the public key, so a policy lists public keys and
// nothing an operator types can make two keys share a name.
package intent

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// domain is signed before the times and the spec's bytes: the domain of tpdeploy's intent
// signatures. domainV1 is the first format's, which signed the spec alone (an intent with
// no SignedAt); agents still verify it, and a node with intents_not_before refuses it.
const (
	domain   = "tpdeploy intent v2\n"
	domainV1 = "tpdeploy intent v1\n"
)

// message is what is signed: the domain, "signed_at TIME\nnot_after TIME|-\n" (RFC 3339,
// UTC, whole seconds) and the spec's bytes.
func message(in *contract.Intent) []byte {
	if in.SignedAt.IsZero() {
		return append([]byte(domainV1), in.Spec...)
	}
	head := domain + "signed_at " + stamp(in.SignedAt) + "\nnot_after " + stamp(in.NotAfter) + "\n"
	return append([]byte(head), in.Spec...)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// KeyID is a public key's fingerprint: "ed25519:" and the first 8 bytes of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(sum[:8])
}

// Options are a signature's times.
type Options struct {
	// ValidFor, when positive, is how long the signature is good for: NotAfter is the
	// signing time plus ValidFor. Zero: it does not expire (a node's intents_not_before
	// still revokes it).
	ValidFor time.Duration
	// Now is the signing time (zero: the clock's), kept in whole seconds.
	Now time.Time
}

// Sign signs the defaulted spec c with priv, now, without expiry.
func Sign(priv ed25519.PrivateKey, c spec.Cluster) *contract.Intent {
	return SignWith(priv, c, Options{})
}

// SignWith signs the defaulted spec c with priv at o's times.
func SignWith(priv ed25519.PrivateKey, c spec.Cluster, o Options) *contract.Intent {
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	pub := priv.Public().(ed25519.PublicKey)
	in := &contract.Intent{Spec: c.Canonical(), KeyID: KeyID(pub), SignedAt: now.UTC().Truncate(time.Second), PublicKey: pub}
	if o.ValidFor > 0 {
		in.NotAfter = in.SignedAt.Add(o.ValidFor.Round(time.Second))
	}
	in.Sig = ed25519.Sign(priv, message(in))
	return in
}

// Verify checks in's signature with pub and returns the spec it signs.
func Verify(in *contract.Intent, pub ed25519.PublicKey) (spec.Cluster, error) {
	if in == nil {
		return spec.Cluster{}, errors.New("unsigned")
	}
	if KeyID(pub) != in.KeyID {
		return spec.Cluster{}, fmt.Errorf("signed by %s, not by %s", in.KeyID, KeyID(pub))
	}
	for _, t := range []time.Time{in.SignedAt, in.NotAfter} {
		if t.Nanosecond() != 0 {
			return spec.Cluster{}, fmt.Errorf("the intent's time %s is not in whole seconds, as a signer writes it", t.Format(time.RFC3339Nano))
		}
	}
	if in.SignedAt.IsZero() && !in.NotAfter.IsZero() {
		return spec.Cluster{}, errors.New("the intent has an expiry (not_after) but no signing time (signed_at)")
	}
	if !ed25519.Verify(pub, message(in), in.Sig) {
		return spec.Cluster{}, fmt.Errorf("the signature of key %s does not verify: the signed spec was changed, or it was signed by another key", in.KeyID)
	}
	var c spec.Cluster
	dec := json.NewDecoder(bytes.NewReader(in.Spec))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return spec.Cluster{}, fmt.Errorf("the signed spec does not decode (a starter newer than this agent?): %v", err)
	}
	if !bytes.Equal(c.Canonical(), in.Spec) {
		return spec.Cluster{}, errors.New("the signed spec is not in canonical form (a starter of another version than this agent?)")
	}
	return c, nil
}

// Current refuses an intent, verified, that expired before now (its not_after), that was
// signed more than MaxClockSkew after now, or that was signed before notBefore (a node's
// intents_not_before, which revokes every intent signed earlier; zero: none). The times are checked after the signature: they are part
// of what is signed.
func Current(in *contract.Intent, now, notBefore time.Time) error {
	if !in.NotAfter.IsZero() && now.After(in.NotAfter) {
		return &TimeError{Expired: true, Msg: fmt.Sprintf("the signature expired at %s (its not_after; signed at %s, this node's clock reads %s)",
			stamp(in.NotAfter), stamp(in.SignedAt), stamp(now.Truncate(time.Second)))}
	}
	if in.SignedAt.After(now.Add(MaxClockSkew)) {
		return &TimeError{Future: true, Msg: fmt.Sprintf("the spec was signed at %s, in the future: this node's clock reads %s, and a signing time more than %s ahead of it is refused (it would outlive any intents_not_before raised before then); check the signer's and this node's clocks",
			stamp(in.SignedAt), stamp(now.Truncate(time.Second)), MaxClockSkew)}
	}
	if notBefore.IsZero() {
		return nil
	}
	if in.SignedAt.IsZero() {
		return &TimeError{Msg: fmt.Sprintf("the signature carries no signing time (a starter older than signed_at made it), and this node refuses every intent signed before %s", stamp(notBefore))}
	}
	if in.SignedAt.Before(notBefore) {
		return &TimeError{Msg: fmt.Sprintf("the spec was signed at %s, before %s, and this node refuses every intent signed before then", stamp(in.SignedAt), stamp(notBefore))}
	}
	return nil
}

// MaxClockSkew is how far ahead of a node's clock an intent's signed_at may lie: the
// starter's and the node's clocks differ by that much at most (NTP keeps them well within
// it). An intent signed further ahead is refused, or a signer could date intents after any
// intents_not_before an operator will raise later and so survive the revocation.
const MaxClockSkew = 5 * time.Minute

// TimeError is Current's refusal: an expired signature, one signed in the future (Future),
// or a revoked one.
type TimeError struct {
	Expired bool
	Future  bool
	Msg     string
}

func (e *TimeError) Error() string { return e.Msg }

// Matches says whether sent, the spec a request carries, is the signed spec: equal
// canonical bytes, except that a signed executor auto may have become the executor the
// images decided (ray or mp; workflows/image.go). Otherwise the error names the top-level
// fields that differ.
func Matches(signed, sent spec.Cluster) error {
	s := sent.WithDefaults()
	if signed.WithDefaults().Executor == spec.ExecutorAuto && (s.Executor == spec.ExecutorRay || s.Executor == spec.ExecutorMP) {
		s.Executor = spec.ExecutorAuto
	}
	if bytes.Equal(s.Canonical(), signed.Canonical()) {
		return nil
	}
	var a, b map[string]json.RawMessage
	_ = json.Unmarshal(signed.Canonical(), &a)
	_ = json.Unmarshal(s.Canonical(), &b)
	var diff []string
	for k := range a {
		if !bytes.Equal(a[k], b[k]) {
			diff = append(diff, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			diff = append(diff, k)
		}
	}
	sort.Strings(diff)
	return fmt.Errorf("the request's spec is not the signed one (%s differ)", strings.Join(diff, ", "))
}

// Same says whether two intents are the same signature of the same spec (nil equals nil).
func Same(a, b *contract.Intent) bool { return reflect.DeepEqual(a, b) }

// GenerateKey makes an operator's key pair.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// MarshalPrivateKey is a private key as a PEM "PRIVATE KEY" (PKCS #8), the form
// `openssl genpkey -algorithm ed25519` writes.
func MarshalPrivateKey(priv ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePrivateKey reads a PEM "PRIVATE KEY" holding an ed25519 key.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM PRIVATE KEY (write one with `starter keygen`)")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an ed25519 key", k)
	}
	return priv, nil
}

// PublicKeyString is a public key as a policy's trusted_keys take it: standard base64 of
// its 32 bytes.
func PublicKeyString(pub ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(pub) }

// ParsePublicKey reads PublicKeyString's form.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%q is not an ed25519 public key (base64 of 32 bytes, as `starter keygen` prints)", s)
	}
	return ed25519.PublicKey(b), nil
}
