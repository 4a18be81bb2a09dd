#!/usr/bin/env python3
"""A tool-using agent in Python, standard library only, speaking the OpenAI
Chat Completions wire format: one tool, a conversation of two user turns,
each answered after a tool call, the history kept as OpenAI clients keep it
(the assistant's message with its tool_calls, then a "tool" message with
each result). Nothing in it knows Rath: pointed at Rath's model gateway by
its base URL and key, it is a Rath session (docs/gateway.md).

    OPENAI_BASE_URL=http://127.0.0.1:4280/s/my-session/v1 \\
    OPENAI_API_KEY=$(rath creds token add --user acme/alice) \\
    python3 agent.py

MODEL names the model (default gpt-4.1-mini); STREAM=1 streams the answers
(server-sent events, read here by hand). It prints
{"model": ..., "answers": [...]} on stdout, one line. An answer other than
200 ends it with exit status 1 and the server's own message on stderr.
"""

import json
import os
import sys
import urllib.error
import urllib.request

SYSTEM = "Answer with the glossary: look every term up before you answer."
QUESTIONS = ["What is Rath?", "And JetStream?"]
MAX_TURNS = 4  # model calls per question, as a guard against a model that never stops calling

GLOSSARY = {
    "rath": "an event-sourced runtime for agent sessions",
    "jetstream": "the persistence layer of NATS",
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a term up in the glossary.",
            "parameters": {
                "type": "object",
                "properties": {
                    "input": {"type": "string", "description": "the term, or a question naming it"},
                },
                "required": ["input"],
                "additionalProperties": False,
            },
        },
    }
]


class AgentError(Exception):
    """A call that did not give an answer: its message says why."""


def lookup(input):
    """The tool: answers from a fixed glossary, so that every run says the same."""
    for term, meaning in GLOSSARY.items():
        if term in input.lower():
            return f"{term}: {meaning}"
    return f"no entry for {json.dumps(input)}"


def run_tool(call):
    """Runs one tool call of the model's answer and returns its result."""
    name = call["function"]["name"]
    if name != "lookup":
        return f"no tool named {json.dumps(name)}"
    try:
        args = json.loads(call["function"]["arguments"] or "{}")
    except json.JSONDecodeError as e:
        return f"the arguments are not JSON: {e}"
    return lookup(str(args.get("input", "")))


def post(base_url, api_key, body):
    """POSTs a Chat Completions request and returns the open response, or
    raises AgentError with the server's message when it is not 200."""
    url = base_url.rstrip("/") + "/chat/completions"
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode("utf-8"),
        method="POST",
        headers={
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if body.get("stream") else "application/json",
        },
    )
    try:
        return urllib.request.urlopen(req, timeout=120)
    except urllib.error.HTTPError as e:
        raise AgentError(f"POST {url}: {e.code} {e.reason}: {error_message(e.read())}") from None
    except urllib.error.URLError as e:
        raise AgentError(f"POST {url}: {e.reason}") from None


def error_message(raw):
    """The message of an OpenAI error body ({"error": {"message", "code"}}),
    or the body itself when it is not one."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        err = json.loads(text)["error"]
        msg = err["message"]
    except (ValueError, KeyError, TypeError):
        return text or "(no body)"
    if err.get("code"):
        msg += f" (code {err['code']})"
    return msg


def complete(base_url, api_key, model, messages):
    """One non-streamed call: returns the first choice's message."""
    body = {"model": model, "messages": messages, "tools": TOOLS}
    with post(base_url, api_key, body) as resp:
        try:
            answer = json.load(resp)
        except ValueError as e:
            raise AgentError(f"the answer is not JSON: {e}") from None
    if not answer.get("choices"):
        raise AgentError(f"the answer has no choices: {json.dumps(answer)[:200]}")
    return answer["choices"][0]["message"]


def sse_events(resp):
    """The data of each server-sent event of resp, as the SSE format says:
    lines up to a blank line make an event, its "data:" lines joined by
    newlines; comments (":") and other fields are skipped."""
    data = []
    for raw in resp:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
    if data:
        yield "\n".join(data)


def stream(base_url, api_key, model, messages):
    """One streamed call: accumulates the chunks' deltas (text, and tool
    calls by their index) into the message a non-streamed call returns."""
    body = {"model": model, "messages": messages, "tools": TOOLS, "stream": True}
    text, calls, done = [], {}, False
    with post(base_url, api_key, body) as resp:
        for data in sse_events(resp):
            if data == "[DONE]":
                done = True
                break
            try:
                chunk = json.loads(data)
            except ValueError as e:
                raise AgentError(f"a streamed event is not JSON ({e}): {data[:200]}") from None
            if "error" in chunk:
                raise AgentError(f"the stream failed: {error_message(data.encode())}")
            for choice in chunk.get("choices") or []:
                if choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                for tc in delta.get("tool_calls") or []:
                    call = calls.setdefault(tc.get("index", 0), {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                    call["id"] += tc.get("id") or ""
                    fn = tc.get("function") or {}
                    call["function"]["name"] += fn.get("name") or ""
                    call["function"]["arguments"] += fn.get("arguments") or ""
    if not done:
        raise AgentError("the stream ended before data: [DONE]")
    message = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def main():
    base_url = os.environ.get("OPENAI_BASE_URL")
    api_key = os.environ.get("OPENAI_API_KEY")
    model = os.environ.get("MODEL") or "gpt-4.1-mini"
    streaming = os.environ.get("STREAM") == "1"
    if not base_url or not api_key:
        print("agent: set OPENAI_BASE_URL (http://<gateway>/s/<session>/v1) and OPENAI_API_KEY (a gateway token)", file=sys.stderr)
        return 2
    call = stream if streaming else complete

    history = [{"role": "system", "content": SYSTEM}]
    answers = []
    try:
        for question in QUESTIONS:
            history.append({"role": "user", "content": question})
            for _ in range(MAX_TURNS):
                message = call(base_url, api_key, model, history)
                # The assistant's message goes into the history as it came,
                # tool calls and all: the next call sends the whole of it.
                kept = {"role": "assistant", "content": message.get("content")}
                if message.get("tool_calls"):
                    kept["tool_calls"] = [
                        {"id": c["id"], "type": "function", "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}}
                        for c in message["tool_calls"]
                    ]
                history.append(kept)
                if not message.get("tool_calls"):
                    answers.append(message.get("content") or "")
                    break
                for c in message["tool_calls"]:
                    history.append({"role": "tool", "tool_call_id": c["id"], "content": run_tool(c)})
            else:
                raise AgentError(f"no answer to {question!r} after {MAX_TURNS} model calls")
    except AgentError as e:
        print(f"agent: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"model": model, "answers": answers}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
