package sandbox

import "time"

// GitRuns counts the git processes a backend ran.
func GitRuns(l *Local) int64 { return l.gitRuns.Load() }

// MoveClock moves the clock the racy check compares file times with, until
// the test ends.
func MoveClock(by time.Duration) (restore func()) {
	clock = func() time.Time { return time.Now().Add(by) }
	return func() { clock = time.Now }
}

// CallGroupParents are the directories that hold the calls' control
// groups, one per hierarchy; none without cgroups.
func CallGroupParents() []string { return cgroups().parents }
