// Package provider calls language models for the agent worker: OpenAI-style
// Chat Completions servers, the Anthropic Messages API, and deterministic
// in-process stand-ins (Scripted, Recorded) for tests and replay.
//
// Every Provider takes a whole conversation (Request) and returns one answer
// (Response) carrying the raw HTTP bodies as evidence. Failures are *Error
// values that say whether they are retryable; WithRetry does the retrying,
// the SDKs' own retries being off, and reports each failed attempt so the
// caller can record a rath.model.call.failed event per attempt.
//
// API keys are passed in through Config.APIKey. The service reads them at its
// edge from these environment variables, and nothing in this package reads
// the environment:
//
//	OPENAI_API_KEY     for Kind "openai"
//	ANTHROPIC_API_KEY  for Kind "anthropic"
//
// A key never appears in a Response body, an error message or a log line:
// request headers are not captured, and the key string is scrubbed from
// everything else as a precaution.
//
// A key goes only where the caller allows (Config.Endpoints): the
// provider's official endpoint, and endpoints the operator named. The base
// URL is checked when the provider is built, every request's URL before it
// is sent, and every redirect before it is followed; a refusal is
// ErrEndpointNotAllowed, and nothing is sent.
package provider
