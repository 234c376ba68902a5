package lab

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// operatorKey makes the lab operator's signing key: the lab's agents trust its public key
// (trusted_keys, as a real node's policy would), and starter and the tests sign with the
// private key, written to the lab's state directory (SignKeyFile, mode 0600).
func (l *Lab) operatorKey(state string) error {
	pub, priv, err := intent.GenerateKey()
	if err != nil {
		return err
	}
	b, err := intent.MarshalPrivateKey(priv)
	if err != nil {
		return err
	}
	file := filepath.Join(state, "operator.key")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return fmt.Errorf("lab operator key: %w", err)
	}
	if err := os.Chmod(file, 0o600); err != nil {
		return err
	}
	l.SignKey, l.SignKeyFile, l.TrustedKey = priv, file, "lab-operator="+intent.PublicKeyString(pub)
	return nil
}

// Sign is s signed with the lab operator's key.
func (l *Lab) Sign(s spec.Cluster) *contract.Intent { return intent.Sign(l.SignKey, s) }
