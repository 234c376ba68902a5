package codec

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func mustNew(t *testing.T, keys ...[]byte) *Codec {
	t.Helper()
	c, err := New("test keys", keys...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRoundTripHidesTheValue(t *testing.T) {
	c := mustNew(t, newKey(t))
	dc := DataConverter(c)
	in := map[string]string{"image": "vllm/vllm-openai:v0.17.0", "node": "spark-1"}
	p, err := dc.ToPayload(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(p.Metadata[converter.MetadataEncoding]); got != Encoding {
		t.Errorf("encoding = %q, want %q", got, Encoding)
	}
	if got := string(p.Metadata[MetadataKeyID]); got != c.KeyID() {
		t.Errorf("key id = %q, want %q", got, c.KeyID())
	}
	for _, clear := range []string{"vllm-openai", "spark-1", "json/plain"} {
		if bytes.Contains(p.Data, []byte(clear)) {
			t.Errorf("payload holds %q in clear", clear)
		}
	}
	var out map[string]string
	if err := dc.FromPayload(p, &out); err != nil {
		t.Fatal(err)
	}
	if out["image"] != in["image"] || out["node"] != in["node"] {
		t.Errorf("round trip gave %v", out)
	}
	// Two encryptions of one value differ (random nonce).
	p2, _ := dc.ToPayload(in)
	if bytes.Equal(p.Data, p2.Data) {
		t.Error("two encryptions of the same value are identical")
	}
}

func TestRotation(t *testing.T) {
	oldKey, newKeyBytes := newKey(t), newKey(t)
	before := mustNew(t, oldKey)
	after := mustNew(t, newKeyBytes, oldKey) // new key first, old kept for old histories
	old, err := before.Encode([]*commonpb.Payload{plain("from last month")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := after.Decode(old)
	if err != nil {
		t.Fatalf("rotated codec cannot read the old key's payload: %v", err)
	}
	if string(got[0].Data) != "from last month" {
		t.Errorf("decoded %q", got[0].Data)
	}
	fresh, err := after.Encode([]*commonpb.Payload{plain("today")})
	if err != nil {
		t.Fatal(err)
	}
	if id := string(fresh[0].Metadata[MetadataKeyID]); id != KeyID(newKeyBytes) {
		t.Errorf("rotated codec encrypts with %s, want the first key %s", id, KeyID(newKeyBytes))
	}
	_, err = before.Decode(fresh)
	if err == nil || !strings.Contains(err.Error(), KeyID(newKeyBytes)) || !strings.Contains(err.Error(), "test keys") {
		t.Errorf("decoding with a codec lacking the key: want an error naming the key ID and the key source, got %v", err)
	}
}

func TestDecodeRefusesTamperingAndPassesPlainPayloads(t *testing.T) {
	c := mustNew(t, newKey(t))
	enc, err := c.Encode([]*commonpb.Payload{plain("x")})
	if err != nil {
		t.Fatal(err)
	}
	enc[0].Data[len(enc[0].Data)-1] ^= 1
	if _, err := c.Decode(enc); err == nil {
		t.Error("a modified ciphertext decoded")
	}
	short := &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte(Encoding), MetadataKeyID: []byte(c.KeyID())}, Data: []byte{1, 2}}
	if _, err := c.Decode([]*commonpb.Payload{short}); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("short ciphertext: %v", err)
	}
	p := plain("written before encryption was turned on")
	got, err := c.AllowPlaintext().Decode([]*commonpb.Payload{p})
	if err != nil || got[0] != p {
		t.Errorf("an unencrypted payload must pass through the codec server's codec: %v", err)
	}
}

// Finding 2 of #23: with a key set, an unencrypted payload (a foreign workflow's, the
// CLI's) is refused, not handed to the agent.
func TestDecodeRefusesPlaintextWhenAKeyIsSet(t *testing.T) {
	c := mustNew(t, newKey(t))
	enc, err := c.Encode([]*commonpb.Payload{plain("ok")})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*commonpb.Payload{
		plain(`{"node":"node-a","root":"/etc","files":["shadow"]}`),
		{Metadata: map[string][]byte{converter.MetadataEncoding: []byte("json/plain")}, Data: []byte(`{}`)},
		{}, // no metadata at all
	} {
		_, err := c.Decode([]*commonpb.Payload{enc[0], p})
		if !errors.Is(err, ErrPlaintext) {
			t.Errorf("plaintext %v decoded: err %v", p.Metadata, err)
		}
	}
}

func TestParseKeys(t *testing.T) {
	k := newKey(t)
	tests := []struct {
		name, file string
		want       int
		wantErr    string
	}{
		{"base64", base64.StdEncoding.EncodeToString(k) + "\n", 1, ""},
		{"raw url base64", base64.RawURLEncoding.EncodeToString(k), 1, ""},
		{"hex", hex.EncodeToString(k), 1, ""},
		{"comments and rotation", "# current\n" + hex.EncodeToString(newKey(t)) + "\n\n# previous\n" + base64.StdEncoding.EncodeToString(k) + "\n", 2, ""},
		{"empty", "# nothing\n", 0, "no keys"},
		{"short key", base64.StdEncoding.EncodeToString(k[:16]), 0, "line 1: not a 32-byte key"},
		{"passphrase", "correct horse battery staple", 0, "line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, err := ParseKeys([]byte(tt.file))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want error %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil || len(keys) != tt.want {
				t.Fatalf("got %d keys, %v; want %d", len(keys), err, tt.want)
			}
		})
	}
	if _, err := New("f", k, k); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate key: %v", err)
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "codec.key")
	if _, err := Load(file); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("missing file: %v", err)
	}
	if err := os.WriteFile(file, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(file); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("bad file: %v", err)
	}
	k := newKey(t)
	if err := os.WriteFile(file, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(file)
	if err != nil || c.KeyID() != KeyID(k) {
		t.Fatalf("Load: %v", err)
	}
}

func TestHTTPHandlerDecodesForTheUI(t *testing.T) {
	c := mustNew(t, newKey(t))
	srv := httptest.NewServer(NewHTTPHandler(c, HandlerOptions{Origins: []string{DefaultUIOrigin}}))
	defer srv.Close()

	// The UI's preflight.
	req, _ := http.NewRequest(http.MethodOptions, srv.URL+"/decode", nil)
	req.Header.Set("Origin", DefaultUIOrigin)
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "content-type,x-namespace")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != DefaultUIOrigin ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "X-Namespace") {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	// Another origin gets no CORS grant.
	req.Header.Set("Origin", "http://evil.example")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS granted to another origin: %v", resp.Header)
	}

	// Decode through the SDK's remote codec, as the CLI's --codec-endpoint does.
	enc, err := DataConverter(c).ToPayload("vllm/vllm-openai:v0.17.0")
	if err != nil {
		t.Fatal(err)
	}
	remote := converter.NewRemotePayloadCodec(converter.RemotePayloadCodecOptions{Endpoint: srv.URL})
	dec, err := remote.Decode([]*commonpb.Payload{enc})
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := converter.GetDefaultDataConverter().FromPayload(dec[0], &s); err != nil || s != "vllm/vllm-openai:v0.17.0" {
		t.Errorf("decoded %q, %v", s, err)
	}
}

func plain(s string) *commonpb.Payload {
	return &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte("binary/plain")}, Data: []byte(s)}
}
