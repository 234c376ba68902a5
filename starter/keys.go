package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// cmdKeygen writes a new operator signing key, readable by its owner only, and prints the
// public key as the agents' policies take it. An existing file is never overwritten.
func cmdKeygen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "the private key file to write (mode 0600; never overwritten)")
	id := fs.String("id", "", "the key's name in the printed trusted_keys entry (default: its fingerprint)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: starter keygen -o FILE [--id NAME]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return helpOK(err)
	}
	if *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	pub, priv, err := intent.GenerateKey()
	if err != nil {
		return err
	}
	pemBytes, err := intent.MarshalPrivateKey(priv)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists: keygen never overwrites a key (rotate by writing a new file)", *out)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(pemBytes); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	name := *id
	if name == "" {
		name = intent.KeyID(pub)
	}
	fmt.Fprintf(stdout, "wrote %s (%s)\n", *out, intent.KeyID(pub))
	fmt.Fprintf(stdout, "public key: %s\n", intent.PublicKeyString(pub))
	fmt.Fprintf(stdout, "for /etc/tpdeploy/policy.yaml on every node:\n  trusted_keys: [{id: %q, ed25519: %q}]\n", name, intent.PublicKeyString(pub))
	return nil
}

// cmdSign prints the Start Workflow input of a deploy of the spec, signed (until
// --sign-valid-for from now, when given): what the Temporal UI's form takes when the
// agents require signed specs.
func cmdSign(args []string, stdout, stderr io.Writer) error {
	c := newCommand("sign", "sign -f spec.yaml --sign-key-file FILE", stderr)
	file := c.fs.String("f", "", "cluster spec (YAML or JSON)")
	if _, err := c.parse(args); err != nil {
		return helpOK(err)
	}
	s, err := readSpec(*file)
	if err != nil {
		return err
	}
	key, err := c.signKey()
	if err != nil {
		return err
	}
	if key == nil {
		return fmt.Errorf("--sign-key-file (or TPDEPLOY_SIGN_KEY_FILE) is required: %w", errUsage)
	}
	in := intent.SignWith(key, s, intent.Options{ValidFor: c.signValidFor})
	b, err := json.Marshal(workflows.DeployRequest{Spec: s, Trigger: "ui", Intent: in})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, string(b))
	until := "does not expire"
	if !in.NotAfter.IsZero() {
		until = "expires at " + in.NotAfter.Format(time.RFC3339)
	}
	fmt.Fprintf(stderr, "signed %s (spec %s) with %s at %s; the signature %s\n", s.Name, s.Hash(), in.KeyID, in.SignedAt.Format(time.RFC3339), until)
	return nil
}
