// Package workflow reads a workflow spec (agents and what they recall from
// memory, MCP servers, routing rules, budgets and stop conditions, written in
// YAML) and decides, with the rules' CEL expressions, where a session goes
// next after each of its events, or what it writes to memory.
//
// A Workflow is immutable once parsed and safe for concurrent use: Parse
// checks the whole file and compiles every expression once, so a workflow
// that parses cannot fail to compile later. Deciding is a pure function of a
// folded session state and the event that produced it (see Activation); the
// selector records each Decision as a rath.selector.decided event, so a
// replay sees why every turn went where it did.
package workflow
