package events

import (
	"fmt"
	"reflect"
	"sort"

	"github.com/openrath/rath/internal/jsondec"
)

// Subject tokens group event kinds so that a worker can filter the sessions
// stream by kind. They are few on purpose: every distinct subject a session
// uses costs server memory.
const (
	TokenLifecycle    = "lifecycle"
	TokenConversation = "conversation"
	TokenModel        = "model"
	TokenTool         = "tool"
	TokenMemory       = "memory"
	TokenControl      = "control"
	TokenAgent        = "agent"
)

// Tokens returns every subject token, for a consumer that receives every
// kind of event.
func Tokens() []string {
	return []string{TokenLifecycle, TokenConversation, TokenModel, TokenTool, TokenMemory, TokenControl, TokenAgent}
}

// Kind describes one registered event kind.
type Kind struct {
	// Type is the CloudEvents type, the wire name.
	Type string
	// Token is the last subject token of the kind's events.
	Token string
	// Schema is the kind's JSON Schema file name in package schema.
	Schema string
	// goType is the type of the kind's data.
	goType reflect.Type
}

// DataSchema is the CloudEvents dataschema URI of the kind's data.
func (k Kind) DataSchema() string { return "urn:rath:schema:" + k.Schema }

// New returns a pointer to a new zero value of the kind's data type.
func (k Kind) New() any { return reflect.New(k.goType).Interface() }

var (
	byType   = map[string]Kind{}
	byGoType = map[reflect.Type]Kind{}
)

// register adds a kind to the catalog. A name or Go type registered twice is a
// programming error caught at init, before any event is read or written. A
// kind's data must say what it holds in a line (Summarizer): a kind without
// one does not compile.
func register[T any, P interface {
	*T
	Summarizer
}](typ, token string) {
	t := reflect.TypeFor[T]()
	if _, dup := byType[typ]; dup {
		panic("events: type registered twice: " + typ)
	}
	if _, dup := byGoType[t]; dup {
		panic("events: Go type registered twice: " + t.String())
	}
	k := Kind{Type: typ, Token: token, Schema: typ[len("rath."):] + ".v1.json", goType: t}
	byType[typ] = k
	byGoType[t] = k
}

func init() {
	register[SessionStarted](TypeSessionStarted, TokenLifecycle)
	register[SessionForked](TypeSessionForked, TokenLifecycle)
	register[SessionMerged](TypeSessionMerged, TokenLifecycle)
	register[SessionPaused](TypeSessionPaused, TokenLifecycle)
	register[SessionResumed](TypeSessionResumed, TokenLifecycle)
	register[SessionClosed](TypeSessionClosed, TokenLifecycle)
	register[SessionArchived](TypeSessionArchived, TokenLifecycle)
	register[SessionPurged](TypeSessionPurged, TokenLifecycle)
	register[ChunkAppended](TypeChunkAppended, TokenConversation)
	register[TranscriptCompacted](TypeTranscriptCompacted, TokenConversation)
	register[ModelCalled](TypeModelCalled, TokenModel)
	register[UsageRecorded](TypeUsageRecorded, TokenModel)
	register[ToolRequested](TypeToolRequested, TokenTool)
	register[ToolStarted](TypeToolStarted, TokenTool)
	register[ToolCompleted](TypeToolCompleted, TokenTool)
	register[ToolFailed](TypeToolFailed, TokenTool)
	register[ToolCleared](TypeToolCleared, TokenTool)
	register[SandboxPlaced](TypeSandboxPlaced, TokenTool)
	register[SandboxRequested](TypeSandboxRequested, TokenTool)
	register[SandboxRefused](TypeSandboxRefused, TokenTool)
	register[MemoryRecalled](TypeMemoryRecalled, TokenMemory)
	register[MemoryWritten](TypeMemoryWritten, TokenMemory)
	register[MemoryRetracted](TypeMemoryRetracted, TokenMemory)
	register[SelectorDecided](TypeSelectorDecided, TokenControl)
	register[WorkPending](TypeWorkPending, TokenControl)
	register[WorkDone](TypeWorkDone, TokenControl)
	register[ValidationPassed](TypeValidationPassed, TokenControl)
	register[ValidationFailed](TypeValidationFailed, TokenControl)
	register[ExperimentRecorded](TypeExperimentRecorded, TokenControl)
	register[ApprovalRequested](TypeApprovalRequested, TokenControl)
	register[ApprovalGranted](TypeApprovalGranted, TokenControl)
	register[ApprovalRejected](TypeApprovalRejected, TokenControl)
	register[ApprovalExpired](TypeApprovalExpired, TokenControl)
	register[TurnRequested](TypeTurnRequested, TokenAgent)
	register[TurnCompleted](TypeTurnCompleted, TokenAgent)
	register[TurnFailed](TypeTurnFailed, TokenAgent)
	register[ModelCallFailed](TypeModelCallFailed, TokenModel)
	register[HandlerFailed](TypeHandlerFailed, TokenControl)
}

// Lookup returns the kind registered under a CloudEvents type.
func Lookup(typ string) (Kind, bool) {
	k, ok := byType[typ]
	return k, ok
}

// KindOf returns the kind whose data type is the dynamic type of data (a value
// or a pointer to one).
func KindOf(data any) (Kind, bool) {
	t := reflect.TypeOf(data)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	k, ok := byGoType[t]
	return k, ok
}

// Kinds lists every registered kind, ordered by type.
func Kinds() []Kind {
	out := make([]Kind, 0, len(byType))
	for _, k := range byType {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

// DecodeData decodes an event's JSON data into a new value of its kind's type
// and returns a pointer to it.
func DecodeData(typ string, data []byte) (any, error) {
	k, ok := Lookup(typ)
	if !ok {
		return nil, &UnknownTypeError{Type: typ}
	}
	v := k.New()
	if len(data) == 0 {
		return v, nil
	}
	if err := jsondec.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("decode %s data: %w", typ, err)
	}
	return v, nil
}

// UnknownTypeError reports a CloudEvents type missing from the catalog.
type UnknownTypeError struct{ Type string }

func (e *UnknownTypeError) Error() string { return fmt.Sprintf("unknown event type %q", e.Type) }
