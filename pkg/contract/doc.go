// Package contract holds no code: its test keeps the packages a program
// imports to use Rath (pkg/rath, pkg/agentserver, pkg/client,
// pkg/toolserver, pkg/agentapi) from linking the workflow engine (CEL,
// YAML, internal/workflow) or a service (ADR 0024, ADR 0038).
package contract
