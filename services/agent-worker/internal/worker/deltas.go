package worker

import (
	"encoding/json"
	"fmt"

	"github.com/openrath/rath/internal/turn"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
)

// deltas publishes a turn's answer as it comes, on its session's delta
// subject (events.Delta: live hints for watchers, never stored). Each
// model attempt is an answer of its own: the turn's ID, then
// "<turn>#<attempt>" for an attempt after a failed one, which the failed
// one's done delta ends.
type deltas struct {
	w       *Worker
	subject string
	turn    string
	d       events.Delta
}

func (w *Worker) deltas(a *turn.Ask) *deltas {
	return &deltas{w: w, subject: events.DeltaSubject(events.TenantOrDefault(a.State.Tenant), a.Stored.Session), turn: a.Request.TurnID,
		d: events.Delta{Session: a.Stored.Session, Answer: a.Request.TurnID, Agent: a.Request.Agent}}
}

// add publishes a piece of the answer.
func (p *deltas) add(d provider.Delta) {
	p.d.Text, p.d.Tool = d.Text, nil
	if c := d.Call; c != nil {
		p.d.Tool = &events.DeltaTool{Index: c.Index, ID: c.ID, Name: c.Name, Arguments: c.Arguments}
	}
	p.publish()
}

// attemptFailed ends the answer of failed attempt n; the next attempt's
// pieces are another answer's.
func (p *deltas) attemptFailed(n int) {
	p.done()
	p.d.Answer, p.d.N = fmt.Sprintf("%s#%d", p.turn, n+1), 0
}

// done publishes the answer's last delta, if it had any.
func (p *deltas) done() {
	if p.d.N == 0 {
		return
	}
	p.d.Text, p.d.Tool, p.d.Done = "", nil, true
	p.publish()
	p.d.Done = false
}

func (p *deltas) publish() {
	b, err := json.Marshal(p.d)
	if err == nil {
		err = p.w.c.Conn().Publish(p.subject, b)
	}
	if err != nil {
		p.w.log.Debug("a delta is not published", "subject", p.subject, "err", err)
	}
	p.d.N++
}
