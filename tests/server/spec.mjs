// Speculative decoding in the server (issue 47): `npullm serve --spec lookup` checks guesses from
// each request's own text, and a request's `prediction` (OpenAI's Predicted Outputs), through the
// official `openai` client:
//   - greedy replies are the same with and without a prediction, streamed and not, and alone or two
//     at once (the verify steps then hold both sequences' guesses);
//   - four greedy streams at once give the text `npullm run` gives without speculation;
//   - a prediction equal to the reply is mostly taken: usage.completion_tokens_details counts the
//     accepted and rejected prediction tokens;
//   - /metrics counts guesses, accepted ones (per place) and verify steps;
//   - a prediction with structured output is refused by name.
//
// env: NPULLM_URL (a server started with --spec lookup), NPULLM_MODEL, NPULLM_BIN.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { baseUrl, deadline, env, main, runCli } from './lib.mjs';

deadline(120_000);
const URL_ = baseUrl();
const MODEL_PATH = env('NPULLM_MODEL');
const client = new OpenAI({ baseURL: `${URL_}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
const MAX = 96;

async function chat(content, extra = {}) {
  const r = await client.chat.completions.create({ model: '', messages: [{ role: 'user', content }], max_tokens: MAX, temperature: 0, ...extra });
  return { text: r.choices[0].message.content, usage: r.usage };
}

async function streamed(content, extra = {}) {
  const s = await client.chat.completions.create({
    model: '', messages: [{ role: 'user', content }], max_tokens: MAX, temperature: 0, stream: true, stream_options: { include_usage: true }, ...extra,
  });
  let text = '';
  let usage = null;
  for await (const c of s) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) text += ch.delta?.content ?? '';
  }
  return { text, usage };
}

async function metrics() {
  const body = await (await fetch(`${URL_}/metrics`)).text();
  const value = (name) => Number((body.match(new RegExp(`^${name} (\\S+)$`, 'm')) || [])[1] ?? NaN);
  const at = [...body.matchAll(/^npullm_spec_accepted_at_position_total\{position="(\d+)"\} (\S+)$/gm)].map((m) => Number(m[2]));
  return { drafted: value('npullm_spec_draft_tokens_total'), accepted: value('npullm_spec_accepted_tokens_total'),
    steps: value('npullm_spec_verify_steps_total'), at };
}

main(async () => {
  const a = 'Tell me a story about a little dog who finds a red ball.';
  const b = 'Once upon a time, there was a little girl named Lily.';
  const plain = await chat(a);
  const plainB = await chat(b);
  assert.ok(plain.text.length > 0);
  // The reply as its own prediction: the same text, most of it taken from the prediction.
  const predicted = await chat(a, { prediction: { type: 'content', content: plain.text } });
  assert.equal(predicted.text, plain.text);
  const d = predicted.usage.completion_tokens_details;
  assert.ok(d && d.accepted_prediction_tokens > 4 * d.rejected_prediction_tokens, `prediction tokens ${JSON.stringify(d)}`);
  const predictedStream = await streamed(a, { prediction: { type: 'content', content: [{ type: 'text', text: plain.text }] } });
  assert.equal(predictedStream.text, plain.text);
  // Two at once: one with a prediction, one guessing from its own text.
  const [x, y] = await Promise.all([chat(a, { prediction: { type: 'content', content: plain.text } }), streamed(b)]);
  assert.equal(x.text, plain.text);
  assert.equal(y.text, plainB.text);
  // Four streams at once (speculation joins in as the batch thins out) against `npullm run`.
  const prompts = ['Once upon a time', 'The little dog', 'Tom had a red ball. He', 'Lily saw a big'];
  const want = await Promise.all(prompts.map((p) => runCli(['-m', MODEL_PATH, '-p', p, '--temp', '0', '-n', String(MAX)])));
  const got = await Promise.all(prompts.map(async (p) => {
    const s = await client.completions.create({ model: '', prompt: p, max_tokens: MAX, temperature: 0, stream: true });
    let text = '';
    for await (const c of s) text += c.choices[0]?.text ?? '';
    return text;
  }));
  for (let i = 0; i < prompts.length; i++) assert.equal(got[i], want[i].text, `stream ${i} ('${prompts[i]}')`);
  const m = await metrics();
  assert.ok(m.drafted > 0 && m.steps > 0, `metrics ${JSON.stringify(m)}`);
  assert.ok(m.accepted > 0 && m.accepted <= m.drafted, `metrics ${JSON.stringify(m)}`);
  assert.equal(m.at.reduce((s, v) => s + v, 0), m.accepted, 'accepted per position add up');
  // Not with structured output.
  await assert.rejects(chat(a, { prediction: { type: 'content', content: 'x' }, response_format: { type: 'json_object' } }),
    (e) => e.status === 400 && e.error?.param === 'prediction');
  console.log(`spec: ${m.drafted} guesses, ${m.accepted} accepted in ${m.steps} verify steps; prediction ${d.accepted_prediction_tokens} taken, ${d.rejected_prediction_tokens} not`);
});
