// Package codec encrypts Temporal payloads (workflow inputs and results, activity
// arguments, heartbeats, queries, summaries, failure messages) with AES-256-GCM before they
// leave the process, so the Temporal server and its history hold ciphertext only.
//
// Keys come from a key file: one key per line (32 bytes, base64 or hex), blank lines and
// lines starting with # ignored. The first key encrypts; every key decrypts, so keys rotate
// by putting a new key first and keeping the old ones below it until no history needs them.
// Each encrypted payload names its key by ID in its metadata (the ID is a fingerprint of the
// key, not the key).
//
// A payload that is not encrypted is refused by Decode: with a key set, anyone who can
// write to the namespace but does not hold the key (a foreign workflow, the CLI's
// `temporal workflow start --input`) cannot hand the agent an argument. Only a codec made
// with AllowPlaintext (the codec server, which reads histories written before the key was
// set) passes such payloads through.
package codec

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

const (
	// Encoding is the metadata encoding of an encrypted payload.
	Encoding = "binary/encrypted"
	// MetadataKeyID is the metadata key naming the key that encrypted a payload.
	MetadataKeyID = "encryption-key-id"
	// KeyFileEnv is the environment variable naming the key file (flag --codec-key-file).
	KeyFileEnv = "TEMPORAL_CODEC_KEY_FILE"
	// KeySize is the size of an AES-256 key in bytes.
	KeySize = 32
)

// Codec is a converter.PayloadCodec that encrypts with its first key and decrypts with
// any of its keys.
type Codec struct {
	keys   []key
	source string // where the keys came from, for error messages
	// plaintext lets unencrypted payloads through Decode (AllowPlaintext).
	plaintext bool
	// ns and workflow are the workflow the SDK encodes or decodes for
	// (WithSerializationContext); empty without one.
	ns, workflow string
}

// MetadataBinding is the metadata key of the workflow a payload was encrypted for
// (binding): its namespace and workflow ID, which are part of the associated data, so a
// payload copied into another workflow's history fails to decrypt there.
const MetadataBinding = "encryption-binding"

// binding is a payload's MetadataBinding value.
func binding(ns, workflow string) string {
	return "tpdeploy-aad v1\nnamespace " + ns + "\nworkflow " + workflow
}

var _ converter.PayloadCodecWithSerializationContext = (*Codec)(nil)

// WithSerializationContext returns a copy of c bound to the workflow the SDK serializes
// for: what it encodes carries that workflow's namespace and ID in its associated data, and
// it decodes only payloads bound to that workflow (or bound to none: those written without
// a workflow, as the Temporal UI's Start Workflow form does through the codec server). The
// SDK gives no run ID (a start's input is encoded before the server makes the run), so a
// payload can still be replayed into another run of the same workflow ID.
func (c *Codec) WithSerializationContext(sc converter.SerializationContext) converter.PayloadCodec {
	cp := *c
	switch x := sc.(type) {
	case converter.WorkflowSerializationContext:
		cp.ns, cp.workflow = x.Namespace, x.WorkflowID
	case converter.ActivitySerializationContext:
		cp.ns, cp.workflow = x.Namespace, x.WorkflowID
	default:
		cp.ns, cp.workflow = "", ""
	}
	if cp.workflow == "" {
		cp.ns = ""
	}
	return &cp
}

// bindsTo says whether a payload bound to b may be decoded for c's workflow: its own, or,
// for a schedule, whose client encodes an action's input for the action's ID while the
// server runs it as ID-TIME (RFC 3339), one of the schedule's runs.
func (c *Codec) bindsTo(b string) bool {
	if c.workflow == "" || b == "" || b == binding(c.ns, c.workflow) {
		return true
	}
	for i := len(c.workflow) - 1; i > 0; i-- {
		if c.workflow[i] != '-' {
			continue
		}
		if _, err := time.Parse(time.RFC3339, c.workflow[i+1:]); err == nil && b == binding(c.ns, c.workflow[:i]) {
			return true
		}
	}
	return false
}

// aad is the associated data of a payload encrypted with key id for binding b.
func aad(id, b string) []byte {
	if b == "" {
		return []byte(id)
	}
	return []byte(id + "\n" + b)
}

// AllowPlaintext returns a copy of c whose Decode passes unencrypted payloads through
// unchanged, for reading histories written before encryption was turned on (the codec
// server). Agents and starter never use it: a payload they act on must be encrypted.
func (c *Codec) AllowPlaintext() *Codec {
	cp := *c
	cp.plaintext = true
	return &cp
}

// ErrPlaintext is Decode's refusal of an unencrypted payload.
var ErrPlaintext = errors.New("payload is not encrypted")

type key struct {
	id   string
	aead cipher.AEAD
}

var _ converter.PayloadCodec = (*Codec)(nil)

// New returns a codec for raw 32-byte keys; the first encrypts. source names where the
// keys came from in error messages (a file name).
func New(source string, keys ...[]byte) (*Codec, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no keys", source)
	}
	c := &Codec{source: source}
	seen := map[string]bool{}
	for i, k := range keys {
		if len(k) != KeySize {
			return nil, fmt.Errorf("%s: key %d is %d bytes, want %d (AES-256)", source, i+1, len(k), KeySize)
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, fmt.Errorf("%s: key %d: %w", source, i+1, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%s: key %d: %w", source, i+1, err)
		}
		id := KeyID(k)
		if seen[id] {
			return nil, fmt.Errorf("%s: key %d (%s) is listed twice", source, i+1, id)
		}
		seen[id] = true
		c.keys = append(c.keys, key{id: id, aead: aead})
	}
	return c, nil
}

// Load reads a key file (see the package documentation for its format).
func Load(file string) (*Codec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("codec key file: %w", err)
	}
	keys, err := ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("codec key file %s: %w", file, err)
	}
	return New(file, keys...)
}

// ParseKeys reads the keys of a key file: one per line, base64 (standard or URL, padded
// or not) or hex, each 32 bytes once decoded.
func ParseKeys(data []byte) ([][]byte, error) {
	var keys [][]byte
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, ok := decodeKey(line)
		if !ok {
			return nil, fmt.Errorf("line %d: not a %d-byte key in base64 or hex (make one with: head -c 32 /dev/urandom | base64)", n+1, KeySize)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys (make one with: head -c 32 /dev/urandom | base64)")
	}
	return keys, nil
}

func decodeKey(s string) ([]byte, bool) {
	if len(s) == 2*KeySize {
		if k, err := hex.DecodeString(s); err == nil {
			return k, true
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == KeySize {
			return k, true
		}
	}
	return nil, false
}

// KeyID is the ID a key is named by in payload metadata: a fingerprint (the first 8 bytes
// of its SHA-256, in hex) that does not reveal the key.
func KeyID(k []byte) string {
	sum := sha256.Sum256(k)
	return hex.EncodeToString(sum[:8])
}

// KeyID is the ID of the key that encrypts.
func (c *Codec) KeyID() string { return c.keys[0].id }

// Encode encrypts every payload with the first key.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	k := c.keys[0]
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return payloads, fmt.Errorf("encrypt payload: %w", err)
		}
		nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(plain)+k.aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return payloads, fmt.Errorf("encrypt payload: %w", err)
		}
		meta := map[string][]byte{
			converter.MetadataEncoding: []byte(Encoding),
			MetadataKeyID:              []byte(k.id),
		}
		b := ""
		if c.workflow != "" {
			b = binding(c.ns, c.workflow)
			meta[MetadataBinding] = []byte(b)
		}
		out[i] = &commonpb.Payload{Metadata: meta, Data: k.aead.Seal(nonce, nonce, plain, aad(k.id, b))}
	}
	return out, nil
}

// Decode decrypts encrypted payloads with the key their metadata names. Any other payload
// is refused (ErrPlaintext), unless c was made with AllowPlaintext.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if !bytes.Equal(p.GetMetadata()[converter.MetadataEncoding], []byte(Encoding)) {
			if !c.plaintext {
				return payloads, fmt.Errorf("decode payload (encoding %q): %w, and %s holds the keys every payload must be encrypted with: refused (a workflow or client without the key wrote it)",
					p.GetMetadata()[converter.MetadataEncoding], ErrPlaintext, c.source)
			}
			out[i] = p
			continue
		}
		id := string(p.GetMetadata()[MetadataKeyID])
		k, ok := c.key(id)
		if !ok {
			return payloads, fmt.Errorf("decrypt payload: it was encrypted with key %s, which %s does not hold (it holds %s)", id, c.source, strings.Join(c.ids(), ", "))
		}
		n := k.aead.NonceSize()
		if len(p.Data) < n+k.aead.Overhead() {
			return payloads, fmt.Errorf("decrypt payload (key %s): %d bytes is too short", id, len(p.Data))
		}
		b := string(p.GetMetadata()[MetadataBinding])
		if !c.bindsTo(b) {
			return payloads, fmt.Errorf("decrypt payload (key %s): it was encrypted for another workflow (%s), not namespace %s workflow %s: refused (copied from another history?)",
				id, strings.ReplaceAll(strings.TrimPrefix(b, "tpdeploy-aad v1\n"), "\n", ", "), c.ns, c.workflow)
		}
		plain, err := k.aead.Open(nil, p.Data[:n], p.Data[n:], aad(id, b))
		if err != nil {
			return payloads, fmt.Errorf("decrypt payload (key %s): %w", id, err)
		}
		var orig commonpb.Payload
		if err := proto.Unmarshal(plain, &orig); err != nil {
			return payloads, fmt.Errorf("decrypt payload (key %s): %w", id, err)
		}
		out[i] = &orig
	}
	return out, nil
}

func (c *Codec) key(id string) (key, bool) {
	for _, k := range c.keys {
		if k.id == id {
			return k, true
		}
	}
	return key{}, false
}

func (c *Codec) ids() []string {
	ids := make([]string, len(c.keys))
	for i, k := range c.keys {
		ids[i] = k.id
	}
	return ids
}

// DataConverter is the SDK's default data converter with every payload passed through c.
func DataConverter(c *Codec) converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}
