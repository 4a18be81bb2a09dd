// Package retail is the small shop that rath demo support runs: its
// database (users, products, orders), the tools an assistant serves
// customers with, and the policy those tools enforce. The database is a
// JSON document; every change is a tool call, so the shop's state at any
// point of a session is its seed changed by the session's completed calls,
// in log order (Fold), and a fork of the session has the state of its fork
// point.
package retail

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// DB is the shop's database. Amounts are whole dollars.
type DB struct {
	// Today is the shop's date (YYYY-MM-DD): the policy's day counts start
	// from it, so a run does not depend on the day it runs.
	Today    string              `json:"today"`
	Users    map[string]*User    `json:"users"`
	Products map[string]*Product `json:"products"`
	Orders   map[string]*Order   `json:"orders"`
}

// User is a customer.
type User struct {
	Name  string `json:"name"`
	Zip   string `json:"zip"`
	Email string `json:"email,omitempty"`
}

// Product is a thing the shop sells.
type Product struct {
	Name  string `json:"name"`
	Price int    `json:"price"`
}

// Order is a customer's order.
type Order struct {
	User      string `json:"user"`
	Status    string `json:"status"`
	Placed    string `json:"placed"`
	Delivered string `json:"delivered,omitempty"`
	Items     []Item `json:"items"`
	Total     int    `json:"total"`
	Refunded  int    `json:"refunded"`
}

// Item is one line of an order.
type Item struct {
	Product string `json:"product"`
	Price   int    `json:"price"`
}

// Order statuses.
const (
	StatusPending   = "pending"
	StatusDelivered = "delivered"
	StatusCancelled = "cancelled"
	StatusRefunded  = "refunded"
)

// RefundWindowDays is how long after delivery an order may be refunded.
const RefundWindowDays = 30

// ParseDB decodes a database and checks that it holds together: a date,
// orders of known users and products.
func ParseDB(data []byte) (*DB, error) {
	var db DB
	if err := json.Unmarshal(data, &db); err != nil {
		return nil, fmt.Errorf("retail database: %w", err)
	}
	var errs []error
	if _, err := time.Parse(time.DateOnly, db.Today); err != nil {
		errs = append(errs, fmt.Errorf("today %q is not a date (YYYY-MM-DD)", db.Today))
	}
	for _, id := range sortedKeys(db.Orders) {
		o := db.Orders[id]
		if o == nil {
			errs = append(errs, fmt.Errorf("order %s is null", id))
			continue
		}
		if db.Users[o.User] == nil {
			errs = append(errs, fmt.Errorf("order %s: unknown user %q", id, o.User))
		}
		for _, it := range o.Items {
			if db.Products[it.Product] == nil {
				errs = append(errs, fmt.Errorf("order %s: unknown product %q", id, it.Product))
			}
		}
		if o.Delivered != "" {
			if _, err := time.Parse(time.DateOnly, o.Delivered); err != nil {
				errs = append(errs, fmt.Errorf("order %s: delivered %q is not a date", id, o.Delivered))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("retail database: %w", err)
	}
	return &db, nil
}

// JSON is the database as the document a task's expected state is compared
// with.
func (db *DB) JSON() []byte {
	b, err := json.MarshalIndent(db, "", "  ")
	if err != nil {
		panic(err) // plain structs of strings and ints always encode
	}
	return b
}

func (db *DB) clone() *DB {
	var c DB
	if err := json.Unmarshal(db.JSON(), &c); err != nil {
		panic(err)
	}
	return &c
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// PolicyError is a call the policy refuses: Rule names the rule of
// POLICY.md, Detail says why this call breaks it.
type PolicyError struct {
	Rule   string
	Detail string
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("policy %s: %s", e.Rule, e.Detail)
}

// Policy rules, as POLICY.md numbers them.
const (
	RuleIdentity = "1 (verify identity)"
	RuleCancel   = "2 (cancel only pending orders)"
	RuleRefund   = "3 (refund only delivered orders, within 30 days)"
	RuleApproval = "4 (refunds over $200 need a supervisor)"
)

// IsPolicy reports whether err is a refusal by the policy.
func IsPolicy(err error) bool {
	var p *PolicyError
	return errors.As(err, &p)
}

// normalize is how names are compared: case and spacing do not matter.
func normalize(s string) string {
	return strings.ToLower(strings.Join(strings.Fields(s), " "))
}
