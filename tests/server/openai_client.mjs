// The official `openai` npm client against `npullm serve`: models, chat and legacy completions,
// streamed and not, greedy output equal to `npullm run`, alone and among 7 concurrent streams,
// stop strings, seeded sampling and prefix-cache reuse.
//
// env: NPULLM_URL, NPULLM_BIN, NPULLM_MODEL, optional NPULLM_RUN_FLAGS, NPULLM_API_KEY.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { authHeaders, baseUrl, deadline, env, main, modelIdFromPath, openaiFinish, runCli, sleep } from './lib.mjs';

deadline(300_000);
const URL_ = baseUrl();
const MODEL_PATH = env('NPULLM_MODEL');
env('NPULLM_BIN');
const client = new OpenAI({ baseURL: `${URL_}/v1`, apiKey: process.env.NPULLM_API_KEY || 'none', maxRetries: 0, timeout: 120_000 });

const USER_MSG = 'Tell me a story about a little dog who finds a red ball.';
const CHAT_MAX = 48;
const PROMPT = 'Once upon a time, there was a little girl named Lily.';
const TEXT_MAX = 40;
const OTHER_PROMPTS = [
  'Write a story about a cat and a bird.',
  'Once there was a big tree in the park.',
  'Tom and Sue went to the beach.',
  'The sun was hot and the boy was thirsty.',
  'A small frog lived near a pond.',
  'Mom baked a cake for the party.',
  'The dragon was sad because it had no friends.',
];

// Streams a chat request through the client and returns what a caller would reassemble.
async function streamChat(params, onFirst) {
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const r = { content: '', finish: null, usage: null, chunks: 0, ids: new Set(), role: null, afterUsage: 0 };
  for await (const chunk of stream) {
    r.chunks++;
    r.ids.add(chunk.id);
    assert.equal(chunk.object, 'chat.completion.chunk', 'chunk object');
    if (r.usage) r.afterUsage++;
    if (chunk.usage) {
      assert.deepEqual(chunk.choices, [], 'the usage chunk has choices: []');
      r.usage = chunk.usage;
      continue;
    }
    assert.equal(chunk.choices.length, 1, 'one choice per chunk');
    const c = chunk.choices[0];
    if (c.delta?.role) r.role ??= c.delta.role;
    if (c.delta?.content) {
      if (!r.content && onFirst) onFirst();
      r.content += c.delta.content;
    }
    if (c.finish_reason) {
      assert.equal(r.finish, null, 'finish_reason arrives once');
      r.finish = c.finish_reason;
    }
  }
  assert.equal(r.ids.size, 1, 'all chunks share one id');
  assert.equal(r.role, 'assistant', 'the first delta carries role: assistant');
  assert.ok(r.finish === 'stop' || r.finish === 'length', `finish_reason ${r.finish}`);
  assert.ok(r.usage, 'stream_options.include_usage gave a usage chunk');
  assert.equal(r.afterUsage, 0, 'the usage chunk is the last one');
  return r;
}

async function streamText(params) {
  const stream = await client.completions.create({ ...params, stream: true });
  let text = '', finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion', 'completion chunk object');
    const c = chunk.choices[0];
    if (!c) continue;
    text += c.text ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, finish };
}

function checkUsage(u, what) {
  assert.ok(u, `${what}: no usage`);
  for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens'])
    assert.ok(Number.isInteger(u[k]) && u[k] >= 0, `${what}: usage.${k} = ${u[k]}`);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens, `${what}: total = prompt + completion`);
  assert.ok(u.prompt_tokens > 0, `${what}: prompt_tokens > 0`);
}

// The CLI's greedy report must match the server's answer token for token.
function checkAgainstCli(got, finish, usage, cli, what) {
  assert.equal(got, cli.text, `${what}: server text differs from \`npullm run\`\n server: ${JSON.stringify(got)}\n    cli: ${JSON.stringify(cli.text)}`);
  assert.equal(finish, openaiFinish(cli.finish_reason), `${what}: finish_reason vs CLI ${cli.finish_reason}`);
  if (usage && Array.isArray(cli.prompt_ids) && cli.prompt_ids.length)
    assert.equal(usage.prompt_tokens, cli.prompt_ids.length, `${what}: prompt_tokens vs the CLI's prompt_ids`);
  if (usage && Array.isArray(cli.ids) && cli.ids.length)
    assert.equal(usage.completion_tokens, cli.ids.length, `${what}: completion_tokens vs the CLI's generated ids`);
}

// Starts 7 other streaming chats (sampled, 100-200 tokens), resolves once each has produced
// text, so the checked request joins a batch that is busy decoding.
function startOthers(modelId, round) {
  const state = OTHER_PROMPTS.map(() => ({ started: false, doneAt: 0 }));
  let release;
  const allStarted = new Promise((r) => { release = r; });
  const check = () => { if (state.every((s) => s.started || s.doneAt)) release(); };
  const done = Promise.all(OTHER_PROMPTS.map(async (p, i) => {
    try {
      await streamChat({ model: modelId, messages: [{ role: 'user', content: p }], temperature: 0.9, top_p: 0.95,
        seed: 1000 * round + i, max_tokens: 100 + 15 * i }, () => { state[i].started = true; check(); });
    } finally {
      state[i].doneAt = performance.now();
      check();
    }
  }));
  // If one of them fails, surface it rather than waiting for the deadline.
  return { allStarted: Promise.race([allStarted, done]), done, state };
}

// Watches /slots while `promise` runs and returns the busiest step it saw.
async function watchSlots(promise) {
  let busiest = { active: 0 };
  let finished = false;
  promise.then(() => { finished = true; }, () => { finished = true; });
  while (!finished) {
    try {
      const s = await (await fetch(`${URL_}/slots`, { headers: authHeaders() })).json();
      if ((s.step?.active ?? 0) > busiest.active) busiest = s.step;
    } catch { /* informational only */ }
    await sleep(20);
  }
  return busiest;
}

main(async () => {
  // --- models ---
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.equal(models.length, 1, `exactly one model, got ${JSON.stringify(models)}`);
  const modelId = models[0].id;
  assert.equal(modelId, modelIdFromPath(MODEL_PATH), 'model id is the GGUF file name without .gguf');
  assert.equal(models[0].object, 'model');
  assert.equal(models[0].owned_by, 'npullm');
  assert.ok(Number.isInteger(models[0].created), 'model.created is an integer');
  const slots = await (await fetch(`${URL_}/slots`, { headers: authHeaders() })).json();
  assert.equal(slots.model, modelId, '/slots reports the same model id');

  const [cliChat, cliText] = await Promise.all([
    runCli(['-m', MODEL_PATH, '--chat-template', 'chatml', '-p', USER_MSG, '--temp', '0', '-n', String(CHAT_MAX)]),
    runCli(['-m', MODEL_PATH, '-p', PROMPT, '--temp', '0', '-n', String(TEXT_MAX)]),
  ]);
  assert.ok(cliChat.text.length > 0, 'the CLI produced chat text');
  const chatParams = { model: modelId, messages: [{ role: 'user', content: USER_MSG }], temperature: 0, max_tokens: CHAT_MAX };

  // --- chat, non-streamed, alone ---
  const full = await client.chat.completions.create(chatParams);
  assert.equal(full.object, 'chat.completion');
  assert.ok(full.id.startsWith('chatcmpl-'), `id ${full.id}`);
  assert.equal(full.model, modelId);
  assert.equal(full.choices.length, 1);
  assert.equal(full.choices[0].message.role, 'assistant');
  checkUsage(full.usage, 'chat');
  checkAgainstCli(full.choices[0].message.content, full.choices[0].finish_reason, full.usage, cliChat, 'chat alone');

  // --- the same request, streamed ---
  const streamed = await streamChat(chatParams);
  assert.equal(streamed.content, full.choices[0].message.content, 'streamed deltas equal the non-streamed content');
  assert.equal(streamed.finish, full.choices[0].finish_reason, 'streamed finish_reason');
  checkUsage(streamed.usage, 'streamed chat');
  assert.equal(streamed.usage.prompt_tokens, full.usage.prompt_tokens, 'streamed prompt_tokens');
  assert.equal(streamed.usage.completion_tokens, full.usage.completion_tokens, 'streamed completion_tokens');

  // omitting `model` is allowed
  const noModel = await client.chat.completions.create({ ...chatParams, model: undefined });
  assert.equal(noModel.choices[0].message.content, cliChat.text, 'request without model');

  // --- legacy /v1/completions ---
  const textParams = { model: modelId, prompt: PROMPT, temperature: 0, max_tokens: TEXT_MAX };
  const tfull = await client.completions.create(textParams);
  assert.equal(tfull.object, 'text_completion');
  checkUsage(tfull.usage, 'completion');
  checkAgainstCli(tfull.choices[0].text, tfull.choices[0].finish_reason, tfull.usage, cliText, 'completion');
  const tstream = await streamText(textParams);
  assert.equal(tstream.text, tfull.choices[0].text, 'streamed completion text');
  assert.equal(tstream.finish, tfull.choices[0].finish_reason, 'streamed completion finish_reason');

  // --- greedy equality while 7 other streams decode in the same batches ---
  for (const [round, streamChecked] of [[1, false], [2, true]]) {
    const others = startOthers(modelId, round);
    await others.allStarted;
    const t0 = performance.now();
    const checked = streamChecked
      ? streamChat(chatParams).then((r) => ({ text: r.content, finish: r.finish, usage: r.usage }))
      : client.chat.completions.create(chatParams).then((r) => ({ text: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: r.usage }));
    const [busiest, got] = await Promise.all([watchSlots(checked), checked]);
    await others.done;
    checkAgainstCli(got.text, got.finish, got.usage, cliChat, `chat among 7 streams (round ${round}, ${streamChecked ? 'streamed' : 'not streamed'})`);
    const overlapping = others.state.filter((s) => s.doneAt > t0).length;
    console.log(`round ${round}: ${overlapping}/7 other streams were still running when the checked request started; busiest step seen ${JSON.stringify(busiest)}`);
    if (!overlapping) console.warn('WARNING: no overlap; the concurrent check did not really run concurrently');
  }

  // --- stop strings: greedy output cut before the first occurrence ---
  const words = [...cliChat.text.matchAll(/[A-Za-z]{3,}/g)].filter((m) => m.index >= 8);
  if (words.length) {
    const stop = words[0][0];
    const want = cliChat.text.slice(0, cliChat.text.indexOf(stop));
    const r1 = await client.chat.completions.create({ ...chatParams, stop });
    assert.equal(r1.choices[0].message.content, want, `stop ${JSON.stringify(stop)}: content`);
    assert.equal(r1.choices[0].finish_reason, 'stop', 'stop string → finish_reason stop');
    const r2 = await streamChat({ ...chatParams, stop: ['zzzzqq', stop] });
    assert.equal(r2.content, want, `stop ${JSON.stringify(stop)}: streamed content`);
    assert.equal(r2.finish, 'stop');
  } else {
    console.warn('WARNING: greedy text has no word to use as a stop string; stop check skipped');
  }

  // --- seeded sampling is reproducible ---
  const seeded = { ...chatParams, temperature: 0.9, top_p: 0.95, seed: 1234 };
  const s1 = await client.chat.completions.create(seeded);
  const s2 = await client.chat.completions.create(seeded);
  assert.equal(s1.choices[0].message.content, s2.choices[0].message.content, 'same seed, same text');

  // --- prefix cache: turn 2 of a conversation reuses turn 1's rows ---
  const turn1 = await client.chat.completions.create({ ...chatParams, max_tokens: 32 });
  const turn2 = await client.chat.completions.create({
    model: modelId, temperature: 0, max_tokens: 16,
    messages: [{ role: 'user', content: USER_MSG }, { role: 'assistant', content: turn1.choices[0].message.content },
      { role: 'user', content: 'What happened next?' }],
  });
  checkUsage(turn2.usage, 'turn 2');
  const cached = turn2.usage.prompt_tokens_details?.cached_tokens;
  assert.ok(Number.isInteger(cached), `usage.prompt_tokens_details.cached_tokens missing: ${JSON.stringify(turn2.usage)}`);
  assert.ok(cached > 0, `turn 2 reports cached_tokens = ${cached}, expected > 0`);
  assert.ok(cached < turn2.usage.prompt_tokens, `cached_tokens ${cached} < prompt_tokens ${turn2.usage.prompt_tokens}`);
  console.log(`turn 2: ${cached} of ${turn2.usage.prompt_tokens} prompt tokens came from the cache`);
});
