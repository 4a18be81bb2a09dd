package spawn

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestConstants(t *testing.T) {
	if oPath != unix.O_PATH || rlimitNProc != unix.RLIMIT_NPROC {
		t.Fatalf("O_PATH %#x, RLIMIT_NPROC %d; this architecture has %#x, %d", oPath, rlimitNProc, unix.O_PATH, unix.RLIMIT_NPROC)
	}
}

func TestLimitsRoundTrip(t *testing.T) {
	l := Limits{CPU: 1, AS: 2, NoFile: 3, FSize: 4, NProc: 5, Binds: 6, UID: 7, GID: 8, Keep: 9, Cgroups: 10}
	got, err := Decode(l.Encode())
	if err != nil || got != l {
		t.Fatalf("Decode(%q) = %+v, %v", l.Encode(), got, err)
	}
	for _, bad := range []string{"cpu=-1", "cpu=x", "bogus=1", "cpu"} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q) accepted", bad)
		}
	}
}
