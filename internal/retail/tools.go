package retail

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/openrath/rath/internal/domainstate"
)

// Tool names. Changes are the tools that change the shop (or, for
// find_user, what the conversation has verified): Fold applies their
// completed calls again.
const (
	ToolFindUser        = "find_user"
	ToolGetOrder        = "get_order"
	ToolCancelOrder     = "cancel_order"
	ToolRefundOrder     = "refund_order"
	ToolEndConversation = "end_conversation"
)

// Changes reports whether a tool's completed calls are part of the state.
func Changes(tool string) bool {
	return tool == ToolFindUser || tool == ToolCancelOrder || tool == ToolRefundOrder
}

// Shop is the state of one conversation with the shop: the database and
// the customers whose identity it has verified.
type Shop struct {
	DB       *DB
	Verified map[string]bool
}

// NewShop is a conversation that starts on a copy of db.
func NewShop(db *DB) *Shop {
	return &Shop{DB: db.clone(), Verified: map[string]bool{}}
}

// Result is what a tool call answers: a message for the model, the data it
// read, and the state changes it made (StateChanges; the dossier lists
// them for every call whose result has them).
type Result struct {
	Message      string               `json:"message"`
	Data         any                  `json:"data,omitempty"`
	StateChanges []domainstate.Change `json:"state_changes,omitempty"`
}

// Text is the result as the model (and the dossier) reads it: one JSON
// object.
func (r Result) Text() string {
	b, err := json.Marshal(r)
	if err != nil {
		return r.Message
	}
	return string(b)
}

// Apply runs one tool call on the shop. A call the policy refuses returns a
// *PolicyError and changes nothing; so does any other error.
func (s *Shop) Apply(tool string, args json.RawMessage) (Result, error) {
	before := s.DB.JSON()
	r, err := s.apply(tool, args)
	if err != nil {
		return Result{}, err
	}
	if after := s.DB.JSON(); !bytes.Equal(before, after) {
		if r.StateChanges, err = domainstate.Changes(before, after); err != nil {
			return Result{}, err
		}
	}
	return r, nil
}

func (s *Shop) apply(tool string, args json.RawMessage) (Result, error) {
	switch tool {
	case ToolFindUser:
		var a struct {
			Name string `json:"name"`
			Zip  string `json:"zip"`
		}
		if err := decode(tool, args, &a); err != nil {
			return Result{}, err
		}
		for _, id := range sortedKeys(s.DB.Users) {
			u := s.DB.Users[id]
			if normalize(u.Name) == normalize(a.Name) && normalize(u.Zip) == normalize(a.Zip) {
				s.Verified[id] = true
				return Result{Message: fmt.Sprintf("Identity verified: customer %s (%s).", id, u.Name), Data: map[string]string{"user_id": id}}, nil
			}
		}
		return Result{}, fmt.Errorf("no customer named %q with zip code %q", a.Name, a.Zip)
	case ToolGetOrder:
		var a struct {
			OrderID string `json:"order_id"`
		}
		if err := decode(tool, args, &a); err != nil {
			return Result{}, err
		}
		o, err := s.order(a.OrderID)
		if err != nil {
			return Result{}, err
		}
		return Result{Message: fmt.Sprintf("Order %s is %s.", a.OrderID, o.Status), Data: o}, nil
	case ToolCancelOrder:
		var a struct {
			OrderID string `json:"order_id"`
			Reason  string `json:"reason"`
		}
		if err := decode(tool, args, &a); err != nil {
			return Result{}, err
		}
		o, err := s.order(a.OrderID)
		if err != nil {
			return Result{}, err
		}
		if o.Status != StatusPending {
			return Result{}, &PolicyError{RuleCancel, fmt.Sprintf("order %s is %s, not pending", a.OrderID, o.Status)}
		}
		o.Status = StatusCancelled
		return Result{Message: fmt.Sprintf("Order %s is cancelled.", a.OrderID)}, nil
	case ToolRefundOrder:
		var a struct {
			OrderID string `json:"order_id"`
			Amount  int    `json:"amount"`
			Reason  string `json:"reason"`
		}
		if err := decode(tool, args, &a); err != nil {
			return Result{}, err
		}
		o, err := s.order(a.OrderID)
		if err != nil {
			return Result{}, err
		}
		if o.Status != StatusDelivered {
			return Result{}, &PolicyError{RuleRefund, fmt.Sprintf("order %s is %s, not delivered", a.OrderID, o.Status)}
		}
		if days := s.daysSince(o.Delivered); days > RefundWindowDays {
			return Result{}, &PolicyError{RuleRefund, fmt.Sprintf("order %s was delivered on %s, %d days before today (%s): more than %d", a.OrderID, o.Delivered, days, s.DB.Today, RefundWindowDays)}
		}
		if left := o.Total - o.Refunded; a.Amount <= 0 || a.Amount > left {
			return Result{}, fmt.Errorf("refund of $%d for order %s: the amount must be between $1 and the $%d not yet refunded", a.Amount, a.OrderID, left)
		}
		o.Refunded += a.Amount
		if o.Refunded == o.Total {
			o.Status = StatusRefunded
		}
		return Result{Message: fmt.Sprintf("Refunded $%d for order %s ($%d of $%d refunded in all).", a.Amount, a.OrderID, o.Refunded, o.Total)}, nil
	}
	return Result{}, fmt.Errorf("the shop has no tool %q", tool)
}

// order returns an order of a verified customer.
func (s *Shop) order(id string) (*Order, error) {
	o := s.DB.Orders[id]
	if o == nil {
		return nil, fmt.Errorf("no order %q", id)
	}
	if !s.Verified[o.User] {
		return nil, &PolicyError{RuleIdentity, fmt.Sprintf("order %s belongs to a customer whose identity this conversation has not verified (find_user first)", id)}
	}
	return o, nil
}

// daysSince counts the days from date to the shop's today (ParseDB checked
// both dates).
func (s *Shop) daysSince(date string) int {
	d, err1 := time.Parse(time.DateOnly, date)
	t, err2 := time.Parse(time.DateOnly, s.DB.Today)
	if err1 != nil || err2 != nil {
		return RefundWindowDays + 1 // unknown: outside the window
	}
	return int(t.Sub(d).Hours() / 24)
}

func decode(tool string, args json.RawMessage, v any) error {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	if err := json.Unmarshal(args, v); err != nil {
		return fmt.Errorf("%s: arguments: %w", tool, err)
	}
	return nil
}

// Specs are the JSON Schemas of the tools' arguments.
var Specs = map[string]struct {
	Description string
	Parameters  string
}{
	ToolFindUser: {"Verify a customer's identity by their full name and zip code; returns their user ID. Required before reading or changing their orders.",
		`{"type":"object","properties":{"name":{"type":"string","minLength":1},"zip":{"type":"string","minLength":1}},"required":["name","zip"],"additionalProperties":false}`},
	ToolGetOrder: {"Read an order of a verified customer: status, dates, items, total and amount refunded.",
		`{"type":"object","properties":{"order_id":{"type":"string","minLength":1}},"required":["order_id"],"additionalProperties":false}`},
	ToolCancelOrder: {"Cancel a pending order of a verified customer.",
		`{"type":"object","properties":{"order_id":{"type":"string","minLength":1},"reason":{"type":"string","minLength":1}},"required":["order_id","reason"],"additionalProperties":false}`},
	ToolRefundOrder: {"Refund an amount (whole dollars) of a delivered order of a verified customer, within 30 days of delivery. Refunds over $200 wait for a supervisor's approval.",
		`{"type":"object","properties":{"order_id":{"type":"string","minLength":1},"amount":{"type":"integer","minimum":1},"reason":{"type":"string","minLength":1}},"required":["order_id","amount","reason"],"additionalProperties":false}`},
	ToolEndConversation: {"End the conversation with the shop (the customer's tool). The shop then grades the conversation.",
		`{"type":"object","additionalProperties":false}`},
}
