package ledger

import (
	api "github.com/openrath/rath/pkg/ledgerapi"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// endedTransition decides what a closed or archived session still takes: a
// closed session only its archive, an archived one only its purge, once.
// Everything else is refused session_closed, so a proposer learns to fork.
func endedTransition(st *session.State, id, typ string) error {
	archived := st.Status == session.StatusArchived
	a := st.Archive
	if a == nil {
		a = &session.Archive{}
	}
	switch {
	case !archived && typ == events.TypeSessionArchived:
		return nil
	case !archived && typ == events.TypeSessionPurged:
		return api.Errorf(api.CodeTransition, "session %s is closed but not archived: archive it before purging", id)
	case archived && typ == events.TypeSessionPurged && a.PurgedSeq == 0:
		return nil
	case archived && typ == events.TypeSessionPurged:
		return api.Errorf(api.CodeTransition, "session %s is purged already (at %d)", id, a.PurgedSeq)
	case archived && typ == events.TypeSessionArchived:
		return api.Errorf(api.CodeTransition, "session %s is archived already (at %d, bundle %s)", id, a.Seq, a.BundleRef)
	case archived:
		return api.Errorf(api.CodeClosed, "session %s is archived (at %d, bundle %s); fork it to continue", id, st.Seq, a.BundleRef)
	}
	return api.Errorf(api.CodeClosed, "session %s is closed (at %d); fork it to continue", id, st.Seq)
}
