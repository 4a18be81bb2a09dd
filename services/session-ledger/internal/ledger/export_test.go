package ledger

import (
	"time"

	"github.com/openrath/rath/pkg/events"
)

// SetClock makes a ledger built with c read the time from now.
func SetClock(c *Config, now func() time.Time) { c.clock = now }

// EnterPull counts a pull of p's tenant in flight, as a pull request does.
func (l *Ledger) EnterPull(p events.Principal) (func(), error) { return l.enterPull(p) }
