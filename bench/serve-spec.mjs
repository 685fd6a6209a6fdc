// Speculative decoding served (issue 47's served line): aggregate decode tokens/s of 1, 4 and 8
// concurrent greedy streams against `npullm serve --parallel 8`, with `--spec lookup` and without,
// on loopback; and whether every stream's text is the same both ways.
//
//   node bench/serve-spec.mjs NPULLM_BIN MODEL.gguf [N_GEN] [THREADS]
//   SPEC_FLAGS='--spec draft --draft-model DRAFT.gguf --spec-k 7' node bench/serve-spec.mjs ...
//                  (the speculating server's flags; default '--spec lookup --spec-k 7')
//   PREDICT=0.1 node bench/serve-spec.mjs ...
//                  each request of the speculating run also sends a `prediction`: its reply without
//                  speculation with that fraction of its words changed (an edit, Predicted Outputs)
//
// The prompts quote a passage the model is asked to go on from (the model's own greedy output for a
// seed sentence, made first with speculation off), the kind of input-grounded text prompt lookup is
// for. Tokens/s: generated tokens of all streams / wall time from the first request to the last
// reply (prefill included: each prompt is short). One run per level, servers started fresh, each with
// its blob cache warm from the first start.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [BIN, MODEL, N_GEN = '128', THREADS = '2'] = process.argv.slice(2);
if (!BIN || !MODEL) {
  console.error('usage: node bench/serve-spec.mjs NPULLM_BIN MODEL.gguf [N_GEN] [THREADS]');
  process.exit(2);
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'npullm-serve-spec-'));
const SEEDS = ['Once upon a time', 'The little dog', 'Tom had a red ball. He', 'Lily saw a big', 'One day the sun',
  'The old man walked', 'A bird sat on', 'In the morning the'];

function start(extra) {
  const proc = spawn(BIN, ['serve', '-m', MODEL, '--host', '127.0.0.1', '--port', '0', '--parallel', '8', '-t', THREADS,
    '--cache-dir', path.join(tmp, 'cache'), '--chat-template', 'chatml', ...extra], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  return new Promise((resolve, reject) => {
    proc.stderr.on('data', async (d) => {
      log += d;
      const m = log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m && !proc.url) {
        proc.url = m[1];
        for (let i = 0; i < 600; i++) {
          const r = await fetch(`${proc.url}/health`).catch(() => null);
          if (r && r.status === 200) return resolve(proc);
          await new Promise((z) => setTimeout(z, 200));
        }
        reject(new Error(`not ready:\n${log}`));
      }
    });
    proc.on('exit', (code) => reject(new Error(`serve exited ${code}:\n${log}`)));
  });
}

async function complete(url, prompt, n, prediction) {
  const body = { prompt, max_tokens: n, temperature: 0 };
  if (prediction !== undefined) body.prediction = { type: 'content', content: prediction };
  const r = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body) });
  const j = await r.json();
  if (r.status !== 200) throw new Error(JSON.stringify(j));
  return { text: j.choices[0].text, tokens: j.usage.completion_tokens };
}

async function level(url, prompts, n, predictions = []) {
  const t0 = performance.now();
  const out = await Promise.all(prompts.map((p, i) => complete(url, p, n, predictions[i])));
  const s = (performance.now() - t0) / 1000;
  return { tps: out.reduce((a, o) => a + o.tokens, 0) / s, texts: out.map((o) => o.text) };
}

const n = Number(N_GEN);
const off = await start([]);
// The passages: each seed's greedy continuation, quoted in a prompt that asks for it again.
const passages = [];
for (const s of SEEDS) passages.push(s + (await complete(off.url, s, 96)).text);
const prompts = passages.map((p) => `${p}\n\n${p.slice(0, 40)}`);
const rows = [];
const results = { off: {}, on: {} };
for (const k of [1, 4, 8]) results.off[k] = await level(off.url, prompts.slice(0, k), n);
off.kill('SIGTERM');
await new Promise((z) => off.on('exit', z));
const SPEC = (process.env.SPEC_FLAGS || '--spec lookup --spec-k 7').split(/\s+/).filter(Boolean);
const on = await start(SPEC);
// An edit of each reply: words changed (reversed) at a seeded rate, the rest as written.
const PREDICT = process.env.PREDICT === undefined ? null : Number(process.env.PREDICT);
let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const edit = (t) => t.split(' ').map((w) => (w.length > 1 && rand() < PREDICT ? [...w].reverse().join('') : w)).join(' ');
for (const k of [1, 4, 8])
  results.on[k] = await level(on.url, prompts.slice(0, k), n, PREDICT === null ? [] : results.off[k].texts.map(edit));
const metrics = await (await fetch(`${on.url}/metrics`)).text();
on.kill('SIGTERM');
await new Promise((z) => on.on('exit', z));
const value = (name) => Number((metrics.match(new RegExp(`^${name} (\\S+)$`, 'm')) || [])[1] ?? NaN);
console.log(`| streams | tokens/s without --spec | with ${SPEC.join(' ')} | ratio | same text |`);
console.log(`|---|---|---|---|---|`);
for (const k of [1, 4, 8]) {
  const a = results.off[k], b = results.on[k];
  const same = a.texts.every((t, i) => t === b.texts[i]);
  console.log(`| ${k} | ${a.tps.toFixed(1)} | ${b.tps.toFixed(1)} | ${(b.tps / a.tps).toFixed(2)}x | ${same ? 'yes' : 'NO'} |`);
  rows.push(same);
}
if (PREDICT !== null) console.log(`each request's prediction: its reply without speculation, ${PREDICT * 100} % of its words reversed`);
console.log(`guesses ${value('npullm_spec_draft_tokens_total')}, accepted ${value('npullm_spec_accepted_tokens_total')}, ` +
  `verify steps ${value('npullm_spec_verify_steps_total')}`);
fs.rmSync(tmp, { recursive: true, force: true });
process.exit(rows.every(Boolean) ? 0 : 1);
