package service

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/openrath/rath/pkg/events"
)

// LoadOrCreateKey reads the ledger's signing key from path (PKCS #8 PEM), or,
// when no file is there, creates one (mode 0600, its directory 0700) and
// writes its public key beside it as <name>.pub (PKIX PEM) for verifiers to
// pin. created reports whether the key is new. A key file that others (not
// its owner or group) may read is refused, as ssh refuses one: on a host
// where tool commands run as users of their own (a root tool runner), its
// mode is what keeps them from the key (ADR 0031). Group read is allowed:
// a Kubernetes Secret is mounted 0440 for the pod's fsGroup.
func LoadOrCreateKey(path string) (key *events.SigningKey, created bool, err error) {
	data, err := readPrivate(path)
	if err == nil {
		key, err := events.ParsePrivateKey(data)
		if err != nil {
			return nil, false, fmt.Errorf("signing key %s: %w", path, err)
		}
		return key, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("signing key: %w", err)
	}
	if key, err = events.GenerateSigningKey(); err != nil {
		return nil, false, err
	}
	priv, err := events.MarshalPrivateKey(key)
	if err != nil {
		return nil, false, err
	}
	pub, err := events.MarshalPublicKey(key.Public())
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("signing key: %w", err)
	}
	// The key is written whole to a file of its own, then linked to its
	// name, which fails if the name exists: two ledgers starting at once on
	// one directory never each write a key of their own, and the loser
	// reads the winner's key whole (with O_EXCL on the name itself, it
	// could read the file created and not yet written).
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ledger-key-*")
	if err != nil {
		return nil, false, fmt.Errorf("signing key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, false, fmt.Errorf("signing key %s: %w", path, err)
	}
	if _, err := tmp.Write(priv); err != nil {
		tmp.Close()
		return nil, false, fmt.Errorf("signing key %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, false, fmt.Errorf("signing key %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, false, fmt.Errorf("signing key %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return LoadOrCreateKey(path)
	} else if err != nil {
		return nil, false, fmt.Errorf("signing key %s: %w", path, err)
	}
	if err := os.WriteFile(PublicKeyPath(path), pub, 0o644); err != nil {
		return nil, false, fmt.Errorf("public key: %w", err)
	}
	return key, true, nil
}

// PublicKeyPath is where LoadOrCreateKey writes the public key of the key at
// path: the same name with the extension .pub.
func PublicKeyPath(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + ".pub"
}

// ReadPublicKeys reads PKIX PEM public key files.
func ReadPublicKeys(paths []string) ([]events.PublicKey, error) {
	var out []events.PublicKey
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("public key file: %w", err)
		}
		k, err := events.ParsePublicKey(data)
		if err != nil {
			return nil, fmt.Errorf("public key file %s: %w", p, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// readPrivate reads a file that others than its owner and group may not
// read.
func readPrivate(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		return nil, fmt.Errorf("%s: mode %04o lets any user of this host read it: chmod 600 %s", path, perm, path)
	}
	return io.ReadAll(f)
}
