// Readiness and drain (issue 50): what a Kubernetes readiness probe and a rolling update rely on.
// This script starts `npullm serve` itself (on 127.0.0.1, a port of its choosing, a fresh cache):
//   1. while the model loads, GET /health answers 503 {"status":"loading"} (GET /livez 200), then 200;
//   2. STREAMS streams run; at SIGTERM every one of them goes on to its end: its text is the text the
//      same request gets alone, with its finish reason and [DONE] (nothing lost);
//   3. during the drain /health answers 503 {"status":"draining"} and a new request 503 with
//      Retry-After; the process exits 0 within the drain time-out;
//   4. a second server with --drain-timeout 1: streams that cannot finish in time are ended with
//      finish_reason "abort" and [DONE], and it exits 0 about a second after SIGTERM.
// Every wait is bounded; the whole script has a deadline.
//
// env: NPULLM_BIN, NPULLM_DRAIN_MODEL (a model slow enough that STREAMS streams of MAX_TOKENS
//      outlast the probes: run.sh passes the golden qwen2 file), optional NPULLM_RUNTIME_FLAGS.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { assertErrorBody, deadline, env, main, sleep, sseData } from './lib.mjs';

deadline(240_000);
const BIN = env('NPULLM_BIN');
const MODEL = env('NPULLM_DRAIN_MODEL');
const STREAMS = 8;
const MAX_TOKENS = 400;
const LONG_TOKENS = 1000;  // in part 4: longer than a 1 s drain lets them run
const DRAIN_TIMEOUT_S = 60;
const PROMPTS = ['Once upon a time', 'The little dog', 'A red ball', 'In the garden', 'The sea was', 'One day Tom', 'Lily saw',
  'The moon'];

// Starts a server; resolves once it printed its address, with { url, proc, log(), exited }.
function startServer(tmp, extra) {
  const flags = (process.env.NPULLM_RUNTIME_FLAGS || '').split(/\s+/).filter(Boolean);
  const args = ['serve', '-m', MODEL, '--host', '127.0.0.1', '--port', '0', '--parallel', String(STREAMS),
    '--cache-dir', path.join(tmp, 'cache'), ...flags, ...extra];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal, at: performance.now() })));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no address printed within 30 s:\n${log}`)), 30_000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m && timer) {
        clearTimeout(timer);
        resolve({ url: m[1], proc, log: () => log, exited });
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}) before listening:\n${log}`)));
  });
}

async function status(url) {
  try {
    const r = await fetch(url);
    return { code: r.status, body: await r.text(), retry: r.headers.get('retry-after') };
  } catch (e) {
    return { code: 0, body: e.cause?.code ?? e.message };
  }
}

function body(prompt, stream, maxTokens = MAX_TOKENS) {
  return JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, stream });
}

async function complete(url, prompt) {
  const r = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: body(prompt, false) });
  assert.equal(r.status, 200, `reference for '${prompt}': ${r.status}`);
  const j = await r.json();
  return { text: j.choices[0].text, finish: j.choices[0].finish_reason, tokens: j.usage.completion_tokens };
}

// A stream: resolves `first` at its first text, `end` with { text, finish, done } when it ends.
function stream(url, prompt, maxTokens = MAX_TOKENS) {
  let gotFirst;
  const first = new Promise((r) => { gotFirst = r; });
  const end = (async () => {
    const r = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: body(prompt, true, maxTokens) });
    assert.equal(r.status, 200, `stream '${prompt}': status ${r.status}`);
    let text = '', finish = null, done = false;
    for await (const data of sseData(r.body)) {
      if (data === '[DONE]') { done = true; continue; }
      const c = JSON.parse(data);
      assert.ok(!c.error, `stream '${prompt}': error event ${data}`);
      text += c.choices[0].text ?? '';
      if (c.choices[0].text) gotFirst();
      if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    }
    gotFirst();
    return { text, finish, done };
  })();
  return { first, end };
}

async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name}(\\{[^}]*\\})? (\\S+)$`, 'm'));
  assert.ok(m, `${name} not in /metrics`);
  return Number(m[2]);
}

async function withTimeout(p, ms, what) {
  let t;
  const timeout = new Promise((_, reject) => { t = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms); });
  try { return await Promise.race([p, timeout]); } finally { clearTimeout(t); }
}

main(async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'npullm-drain-'));
  try {
    // 1. Loading, then ready. A fresh cache: the model's blobs are compiled while /health says so.
    const s = await startServer(tmp, ['--drain-timeout', String(DRAIN_TIMEOUT_S)]);
    const seen = [];
    let live = null;
    for (const until = performance.now() + 120_000; ;) {
      const h = await status(`${s.url}/health`);
      seen.push(h.code);
      if (h.code === 503) {
        assert.equal(JSON.parse(h.body).status, 'loading', `/health while loading: ${h.body}`);
        assert.ok(/^\d+$/.test(h.retry ?? ''), '/health 503 without Retry-After');
        if (live === null) live = (await status(`${s.url}/livez`)).code;
      } else {
        assert.equal(h.code, 200, `/health: ${h.code} ${h.body}`);
        break;
      }
      assert.ok(performance.now() < until, `/health not 200 within 120 s:\n${s.log()}`);
      await sleep(5);
    }
    const loading = seen.filter((c) => c === 503).length;
    if (live !== null) assert.equal(live, 200, '/livez while loading');
    console.log(`/health: ${loading} answers of 503 "loading" while the model loaded, then 200`);

    // 2. References, each request alone; then the streams, all running at SIGTERM.
    const want = [];
    for (const p of PROMPTS.slice(0, STREAMS)) want.push(await complete(s.url, p));
    const streams = PROMPTS.slice(0, STREAMS).map((p) => stream(s.url, p));
    await withTimeout(Promise.all(streams.map((x) => x.first)), 30_000, 'first tokens of every stream');
    const running = await metric(s.url, 'vllm:num_requests_running');
    assert.equal(running, STREAMS, `only ${running} of ${STREAMS} streams still ran before SIGTERM: the model is too fast for this test`);
    const sent = performance.now();
    s.proc.kill('SIGTERM');
    // The signal is taken by a thread of the server's: /health turns 503 within moments.
    for (const until = sent + 2000; (await status(`${s.url}/health`)).code === 200;) {
      assert.ok(performance.now() < until, '/health still 200 two seconds after SIGTERM');
      await sleep(2);
    }

    // 3. While the streams drain: not ready, no new requests, the listener still answers.
    let probes = 0, drainingSeen = false;
    const ended = Promise.all(streams.map((x) => x.end));
    let allEnded = false;
    ended.then(() => { allEnded = true; }, () => { allEnded = true; });
    // The server may exit between the last stream's end and the client seeing it: a refused
    // connection is fine only if every stream then ends.
    const gone = async (what) => {
      await withTimeout(ended, 5000, `${what} refused while streams still ran`);
      return true;
    };
    while (!allEnded && probes < 50) {
      const h = await status(`${s.url}/health`);
      if (h.code === 0 && await gone('/health')) break;
      assert.equal(h.code, 503, `/health during the drain: ${h.code} ${h.body}`);
      assert.equal(JSON.parse(h.body).status, 'draining');
      const r = await fetch(`${s.url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: body('New', false) })
        .catch((e) => ({ status: 0, error: e }));
      if (r.status === 0 && await gone('a new request')) break;
      assert.equal(r.status, 503, `a new request during the drain: ${r.status}`);
      assert.ok(/^\d+$/.test(r.headers.get('retry-after') ?? ''), 'drain 503 without Retry-After');
      const j = await r.json();
      assertErrorBody(j, 'drain 503');
      assert.equal(j.error.code, 'server_draining');
      drainingSeen = true;
      probes++;
      await sleep(20);
    }
    assert.ok(drainingSeen, 'the streams ended before any probe ran during the drain: the model is too fast for this test');
    const got = await withTimeout(ended, (DRAIN_TIMEOUT_S + 10) * 1000, 'streams after SIGTERM');
    const drainedMs = performance.now() - sent;
    got.forEach((g, i) => {
      assert.ok(g.done, `stream ${i}: no [DONE]`);
      assert.equal(g.finish, want[i].finish, `stream ${i}: finish_reason`);
      assert.equal(g.text, want[i].text, `stream ${i}: text differs from the request run alone`);
    });
    const exit = await withTimeout(s.exited, (DRAIN_TIMEOUT_S + 10) * 1000, 'exit after SIGTERM');
    assert.equal(exit.code, 0, `exit status after SIGTERM (signal ${exit.signal}):\n${s.log()}`);
    const tokens = want.reduce((n, w) => n + w.tokens, 0);
    console.log(`drain: ${STREAMS} streams (${tokens} tokens) running at SIGTERM all finished whole in ${drainedMs.toFixed(0)} ms; ` +
      `${probes} probes got /health 503 and a new request 503; exit 0 after ${(exit.at - sent).toFixed(0)} ms`);

    // 4. A drain that runs out of time: what still runs ends with "abort" and [DONE].
    const t = await startServer(tmp, ['--drain-timeout', '1']);
    for (const until = performance.now() + 120_000; (await status(`${t.url}/health`)).code !== 200;) {
      assert.ok(performance.now() < until, '/health not 200');
      await sleep(10);
    }
    const long = PROMPTS.slice(0, STREAMS).map((p) => stream(t.url, p, LONG_TOKENS));
    await withTimeout(Promise.all(long.map((x) => x.first)), 30_000, 'first tokens');
    const at = performance.now();
    t.proc.kill('SIGTERM');
    const cut = await withTimeout(Promise.all(long.map((x) => x.end)), 15_000, 'streams after a 1 s drain');
    const texit = await withTimeout(t.exited, 15_000, 'exit after a 1 s drain');
    assert.equal(texit.code, 0, `exit status:\n${t.log()}`);
    const aborted = cut.filter((c) => c.finish === 'abort').length;
    cut.forEach((c, i) => {
      assert.ok(c.done, `stream ${i}: no [DONE]`);
      assert.ok(['abort', 'length', 'stop'].includes(c.finish), `stream ${i}: finish_reason ${c.finish}`);
      assert.ok(c.text.startsWith(want[i].text.slice(0, 8)), `stream ${i}: not the request's text`);
    });
    assert.ok(aborted > 0, `every stream finished within the 1 s drain: make LONG_TOKENS longer`);
    console.log(`drain time-out 1 s: ${aborted} of ${STREAMS} streams ended with "abort", the rest whole; exit 0 after ` +
      `${(texit.at - at).toFixed(0)} ms`);
    assert.ok(texit.at - at < 6000, 'the 1 s drain took over 6 s');
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
