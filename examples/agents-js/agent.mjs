// A tool-using agent built with the OpenAI Agents SDK, as anyone would write
// it: one tool, a conversation of two user turns, each answered after a
// tool call, the history kept as the SDK keeps it (result.history). Nothing
// in it knows Rath: pointed at Rath's model gateway by its base URL and key,
// it is a Rath session (docs/gateway.md).
//
//   OPENAI_BASE_URL=http://127.0.0.1:4280/s/my-session/v1 \
//   OPENAI_API_KEY=$(rath creds token add --user acme/alice) \
//   node agent.mjs
//
// MODEL names the model (default gpt-4.1-mini); STREAM=1 streams the
// answers. It prints {"model": ..., "answers": [...]} on stdout, one line.
import { OpenAI } from 'openai';
import {
  Agent,
  run,
  tool,
  user,
  setDefaultOpenAIClient,
  setOpenAIAPI,
  setTracingDisabled,
} from '@openai/agents';
import { z } from 'zod';

const baseURL = process.env.OPENAI_BASE_URL;
const apiKey = process.env.OPENAI_API_KEY;
const model = process.env.MODEL || 'gpt-4.1-mini';
const stream = process.env.STREAM === '1';
if (!baseURL || !apiKey) {
  console.error('agent: set OPENAI_BASE_URL (http://<gateway>/s/<session>/v1) and OPENAI_API_KEY (a gateway token)');
  process.exit(2);
}

// The SDK's own settings: Chat Completions (what the gateway serves), and
// no traces exported to OpenAI (the machine may have no network at all).
setDefaultOpenAIClient(new OpenAI({ baseURL, apiKey }));
setOpenAIAPI('chat_completions');
setTracingDisabled(true);

const glossary = {
  rath: 'an event-sourced runtime for agent sessions',
  jetstream: 'the persistence layer of NATS',
};

// lookup answers from a fixed glossary, so that every run says the same.
const lookup = tool({
  name: 'lookup',
  description: 'Look a term up in the glossary.',
  parameters: z.object({ input: z.string().describe('the term, or a question naming it') }),
  execute: async ({ input }) => {
    const term = Object.keys(glossary).find((k) => input.toLowerCase().includes(k));
    return term ? `${term}: ${glossary[term]}` : `no entry for ${JSON.stringify(input)}`;
  },
});

const agent = new Agent({
  name: 'glossary',
  instructions: 'Answer with the glossary: look every term up before you answer.',
  model,
  tools: [lookup],
});

let history = [];
const answers = [];
for (const question of ['What is Rath?', 'And JetStream?']) {
  const result = await run(agent, [...history, user(question)], { maxTurns: 4, stream });
  if (stream) {
    await result.completed;
  }
  history = result.history;
  answers.push(result.finalOutput);
}
console.log(JSON.stringify({ model, answers }));
