package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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

// ErrBadRef is returned (wrapped) for a blob reference that is not sha256:<hex>.
var ErrBadRef = errors.New("malformed blob reference")

// ReadBlob reads at most n bytes of a blob from offset, and the blob's size.
// It does not check the content against the reference: only a reader of the
// whole blob can.
func (s *Store) ReadBlob(ctx context.Context, ref string, offset int64, n int) ([]byte, int64, error) {
	name, ok := strings.CutPrefix(ref, blobPrefix)
	if !ok || len(name) != 2*sha256.Size {
		return nil, 0, fmt.Errorf("%w %q: want sha256:<64 hex digits>", ErrBadRef, ref)
	}
	if _, err := hex.DecodeString(name); err != nil {
		return nil, 0, fmt.Errorf("%w %q: want sha256:<64 hex digits>", ErrBadRef, ref)
	}
	obj, err := s.blobs.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, 0, fmt.Errorf("blob %s: %w", ref, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get blob %s: %w", ref, err)
	}
	defer obj.Close()
	info, err := obj.Info()
	if err != nil {
		return nil, 0, fmt.Errorf("get blob %s: %w", ref, err)
	}
	size := int64(info.Size)
	if offset >= size {
		return []byte{}, size, nil
	}
	if _, err := io.CopyN(io.Discard, obj, offset); err != nil {
		return nil, 0, fmt.Errorf("get blob %s at %d: %w", ref, offset, err)
	}
	buf := make([]byte, min(int64(n), size-offset))
	if _, err := io.ReadFull(obj, buf); err != nil {
		return nil, 0, fmt.Errorf("get blob %s at %d: %w", ref, offset, err)
	}
	return buf, size, nil
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
