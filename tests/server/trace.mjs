// The execution trace of a server (issue 50): `npullm serve --trace FILE` writes it on SIGUSR1 while
// it keeps serving. Four streams run at once; then the trace must hold, for each of them, a track of
// its own with its queue, prefill and decode spans in that order (the decode span saying how many
// tokens it made), the scheduler's decode steps naming the slots they ran, a blob run per decode
// step, and stages on the device's threads. Every wait is bounded.
//
// env: NPULLM_URL, NPULLM_SERVER_PID, NPULLM_TRACE_FILE (the server's --trace file).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { deadline, env, main, sleep, sseData } from './lib.mjs';

deadline(60_000);
const URL = env('NPULLM_URL');
const PID = Number(env('NPULLM_SERVER_PID'));
const FILE = env('NPULLM_TRACE_FILE');
const N = 4, MAX_TOKENS = 24;

async function streamed(prompt) {
  const r = await fetch(`${URL}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: MAX_TOKENS, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  assert.equal(r.status, 200);
  let tokens = 0;
  for await (const d of sseData(r.body)) {
    if (d === '[DONE]') break;
    const j = JSON.parse(d);
    if (j.usage) tokens = j.usage.completion_tokens;
  }
  return tokens;
}

main(async () => {
  fs.rmSync(FILE, { force: true });
  const made = await Promise.all(['Once upon a time', 'The little dog', 'A red ball', 'In the garden'].slice(0, N).map(streamed));
  process.kill(PID, 'SIGUSR1');
  let doc = null;
  for (let i = 0; i < 100 && !doc; ++i) {
    await sleep(100);
    try {
      doc = JSON.parse(fs.readFileSync(FILE, 'utf8'));  // absent or half written: try again
    } catch { /* not yet */ }
  }
  assert.ok(doc, `no trace in ${FILE} 10 s after SIGUSR1`);
  const ev = doc.traceEvents;
  assert.ok(Array.isArray(ev));
  const spans = ev.filter((e) => e.ph === 'X');
  for (const e of spans) {
    assert.ok(typeof e.ts === 'number' && e.ts >= 0 && typeof e.dur === 'number' && e.dur >= 0, JSON.stringify(e));
  }
  // One track per request in the "requests" process (pid 2), named "request N".
  const reqNames = ev.filter((e) => e.ph === 'M' && e.name === 'thread_name' && e.pid === 2);
  assert.ok(reqNames.length >= N, `${reqNames.length} request tracks`);
  let checked = 0;
  for (const t of reqNames) {
    assert.match(t.args.name, /^request \d+$/);
    const mine = spans.filter((e) => e.pid === 2 && e.tid === t.tid);
    const by = Object.fromEntries(mine.map((e) => [e.name, e]));
    for (const k of ['queue', 'prefill', 'decode']) assert.ok(by[k], `${t.args.name}: no ${k} span`);
    assert.ok(by.queue.ts + by.queue.dur <= by.prefill.ts + 0.01, `${t.args.name}: queue ends after prefill starts`);
    assert.ok(by.prefill.ts + by.prefill.dur <= by.decode.ts + 0.01, `${t.args.name}: prefill ends after decode starts`);
    assert.ok(made.includes(by.decode.args.tokens), `${t.args.name}: ${by.decode.args.tokens} tokens, streams made ${made}`);
    checked++;
  }
  assert.ok(checked >= N);
  // The scheduler's decode steps name their slots; with four streams at once some ran together.
  const steps = spans.filter((e) => e.cat === 'genai' && e.name === 'decode step');
  assert.ok(steps.length > 0, 'no decode steps');
  assert.ok(steps.some((s) => s.args.slots.length > 1), 'no decode step ran several slots');
  // Each decode step ran one generate blob on the queue thread; stages ran inside blob runs.
  const blobs = spans.filter((e) => e.cat === 'driver');
  const inside = (a, b) => a.ts >= b.ts - 0.01 && a.ts + a.dur <= b.ts + b.dur + 0.01;
  for (const s of steps.slice(0, 20)) assert.equal(blobs.filter((b) => inside(b, s)).length, 1, `decode step at ${s.ts} us`);
  const stages = spans.filter((e) => e.cat === 'device' && !['chunks', 'barrier wait', 'prepare'].includes(e.name));
  assert.ok(stages.length > 0 && stages.every((st) => blobs.some((b) => inside(st, b))), 'a stage outside every blob run');
  // The server still answers after writing it.
  assert.ok(await streamed('The moon') > 0);
  console.log(`trace: ${spans.length} spans, ${checked} request tracks, ${steps.length} decode steps, ${blobs.length} blob runs`);
});
