package sandbox

import "github.com/openrath/rath/pkg/client"

// A session's seed is unpacked as client.UnpackWorkspace does (ADR 0031).
const (
	MaxSeedBytes   = client.MaxSeedBytes
	MaxSeedEntries = client.MaxSeedEntries
)

// ErrBadSeed is client.ErrBadSeed: a seed archive that cannot be unpacked
// as it is.
var ErrBadSeed = client.ErrBadSeed

func unpack(archive []byte, dir string) error { return client.UnpackWorkspace(archive, dir) }
