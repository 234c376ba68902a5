// Package intent is the operator's signature on a spec: `starter` signs the canonical JSON
// of the defaulted spec (spec.Cluster.Canonical) with the operator's ed25519 key, the deploy
// carries the signature (contract.Intent) in every request that makes an agent act, and an
// agent whose policy names trusted keys verifies it and acts only on what the signed spec
// says. Encryption (package codec) says "someone holding the key wrote this", and every
// agent holds that key; the signature says "an operator asked for this", and no agent holds
// an operator's private key.
//
// The signed message is a fixed context string and the spec's bytes, so a signature made
// for anything else with the same key can never pass for a spec's. A key is named by its
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

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/spec"
)

// domain is signed before the spec's bytes: the domain of tpdeploy's intent signatures.
const domain = "tpdeploy intent v1\n"

func message(specJSON []byte) []byte { return append([]byte(domain), specJSON...) }

// KeyID is a public key's fingerprint: "ed25519:" and the first 8 bytes of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(sum[:8])
}

// Sign signs the defaulted spec c with priv.
func Sign(priv ed25519.PrivateKey, c spec.Cluster) *contract.Intent {
	b := c.Canonical()
	return &contract.Intent{Spec: b, KeyID: KeyID(priv.Public().(ed25519.PublicKey)), Sig: ed25519.Sign(priv, message(b))}
}

// Verify checks in's signature with pub and returns the spec it signs.
func Verify(in *contract.Intent, pub ed25519.PublicKey) (spec.Cluster, error) {
	if in == nil {
		return spec.Cluster{}, errors.New("unsigned")
	}
	if KeyID(pub) != in.KeyID {
		return spec.Cluster{}, fmt.Errorf("signed by %s, not by %s", in.KeyID, KeyID(pub))
	}
	if !ed25519.Verify(pub, message(in.Spec), in.Sig) {
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
