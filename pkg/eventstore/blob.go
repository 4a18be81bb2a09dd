package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// blobPrefix starts every blob reference.
const blobPrefix = "sha256:"

// BlobRef is the content address of data: "sha256:<hex>".
func BlobRef(data []byte) string {
	sum := sha256.Sum256(data)
	return blobPrefix + hex.EncodeToString(sum[:])
}

// PutBlob stores data under its content hash and returns the reference.
// Storing the same data twice stores it once.
func (s *Store) PutBlob(ctx context.Context, data []byte) (string, error) {
	ref := BlobRef(data)
	name := strings.TrimPrefix(ref, blobPrefix)
	if _, err := s.blobs.GetInfo(ctx, name); err == nil {
		return ref, nil
	}
	if _, err := s.blobs.PutBytes(ctx, name, data); err != nil {
		return "", fmt.Errorf("put blob %s: %w", ref, err)
	}
	return ref, nil
}

// GetBlob reads a blob and checks it against its reference.
func (s *Store) GetBlob(ctx context.Context, ref string) ([]byte, error) {
	if !strings.HasPrefix(ref, blobPrefix) {
		return nil, fmt.Errorf("blob reference %q: want sha256:<hex>", ref)
	}
	data, err := s.blobs.GetBytes(ctx, strings.TrimPrefix(ref, blobPrefix))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("blob %s: %w", ref, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get blob %s: %w", ref, err)
	}
	if BlobRef(data) != ref {
		return nil, fmt.Errorf("blob %s: content does not match its hash", ref)
	}
	return data, nil
}
