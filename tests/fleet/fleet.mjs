// Fleet test (issue 50): three `npullm serve` replicas on 127.0.0.1 under a shared-prefix workload
// (many users, a few long system prompts), routed first round-robin, then by a MODEL OF the Gateway API
// Inference Extension's endpoint picker, fresh replicas each time. It reports, per routing, the prefix
// hit rate (from the replicas' own counters), client-side TTFT p50/p99 and throughput, and asserts that
// the picker model beats round-robin on hit rate and on TTFT p50.
//
// The picker model lives here, in tests/, and is not part of npullm: in a cluster the real picker (Go,
// upstream's `epp` image, deploy/k8s/endpoint-picker.yaml) does this. What it models, from upstream's
// sources (kubernetes-sigs/gateway-api-inference-extension, pkg/epp/scheduling/framework/plugins/):
//   - scorer/queue.go (queue-scorer): per endpoint (max - waiting) / (max - min) over the candidates'
//     waiting-queue sizes (vllm:num_requests_waiting); 1 for all when they are equal.
//   - scorer/kvcache_utilization.go (kv-cache-utilization-scorer): 1 - KV-cache usage
//     (vllm:kv_cache_usage_perc, 0-1).
//   - multi/prefix/plugin.go + indexer.go (prefix-cache-scorer): the request's input bytes (for chat,
//     the JSON of its messages) cut into blocks of blockSize characters (64: 16 tokens x 4 characters;
//     a last partial block is dropped; at most 256 blocks), each block hashed chained with the previous
//     block's hash, the chain seeded with the model name's hash; the score of an endpoint is the number
//     of leading blocks the indexer says that endpoint holds, over the number of blocks. After the pick
//     (its PreRequest hook) every block hash of the request is recorded against the chosen endpoint in
//     that endpoint's LRU of lruCapacityPerServer entries; an evicted hash forgets that endpoint.
//   - picker/max_score_picker.go: the weighted sum of the scorers, the highest wins, ties broken at
//     random (a seeded shuffle here, so that a run repeats).
// The weights, block size and LRU capacity are read from deploy/k8s/endpoint-picker.yaml, the config we
// ship. Differences: the block hash is SHA-256 cut to 64 bits, not xxhash (only equality matters);
// JSON.stringify, not Go's json.Marshal, of the messages (same prefix property); metrics are scraped
// from every replica right before each routing decision, where the real picker refreshes them on a
// short interval; one decision at a time. No LoRA scorer (no adapters), no filters, no saturation
// detector or flow control.
//
// Prefix hit rate = increase of npullm_cached_prompt_tokens_total / increase of npullm_prompt_tokens_total
// summed over the replicas between the end of the warm-up and the end of the run; checked equal to the
// sums of usage.prompt_tokens_details.cached_tokens and usage.prompt_tokens in the responses.
// TTFT = from sending the request to the first streamed chunk with text (client side, openai client).
//
// env: NPULLM_BIN, NPULLM_FLEET_MODEL, NPULLM_PICKER_CONFIG (endpoint-picker.yaml), optional
//      NPULLM_RUNTIME_FLAGS, NPULLM_FLEET_REQUESTS (96), NPULLM_FLEET_CONCURRENCY (6),
//      NPULLM_FLEET_PROMPTS (8 system prompts), NPULLM_FLEET_SEED, NPULLM_FLEET_JSON (write results there).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from '../server/node_modules/openai/index.mjs';
import { deadline, env, main, percentile, sleep } from '../server/lib.mjs';

deadline(240_000);
const BIN = env('NPULLM_BIN');
const MODEL = env('NPULLM_FLEET_MODEL');
const PICKER_CONFIG = env('NPULLM_PICKER_CONFIG');
const REPLICAS = 3;
const PARALLEL = 4;              // slots per replica: 4 x 1,152 K/V rows = 288 blocks of 16, the config's LRU size
const THREADS = 1;               // three replicas share this machine's cores
const REQUESTS = Number(env('NPULLM_FLEET_REQUESTS', { fallback: '96' }));
const CONCURRENCY = Number(env('NPULLM_FLEET_CONCURRENCY', { fallback: '6' }));
const PROMPTS = Number(env('NPULLM_FLEET_PROMPTS', { fallback: '8' }));
const SEED = Number(env('NPULLM_FLEET_SEED', { fallback: '50' }));
const SYSTEM_WORDS = 700;        // about 830 tokens each with the gpt-2 vocabulary
const MAX_TOKENS = 8;

// ---- children: every server this script starts is killed on any way out ----
const children = new Set();
let tmpDir = null;
function killAll() { for (const p of children) { try { p.kill('SIGKILL'); } catch { /* gone */ } } }
process.on('exit', () => { killAll(); if (tmpDir) fs.rmSync(tmpDir, { recursive: true, force: true }); });
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => { killAll(); process.exit(1); });

function startReplica(cache, name) {
  const flags = (process.env.NPULLM_RUNTIME_FLAGS || '').split(/\s+/).filter(Boolean);
  const args = ['serve', '-m', MODEL, '--host', '127.0.0.1', '--port', '0', '--parallel', String(PARALLEL),
    '-t', String(THREADS), '--chat-template', 'chatml', '--cache-dir', cache, '--drain-timeout', '2', ...flags];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  children.add(proc);
  let log = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => { children.delete(proc); resolve({ code, signal }); }));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name}: no address printed within 60 s:\n${log}`)), 60_000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m && timer) { clearTimeout(timer); resolve({ name, url: m[1], proc, exited, log: () => log }); }
    });
    exited.then(({ code }) => reject(new Error(`${name} exited (${code}) before listening:\n${log}`)));
  });
}

async function waitReady(r) {
  for (const until = performance.now() + 120_000; ;) {
    try { if ((await fetch(`${r.url}/health`)).status === 200) return; } catch { /* not yet */ }
    assert.ok(performance.now() < until, `${r.name}: /health not 200 within 120 s:\n${r.log()}`);
    await sleep(50);
  }
}

async function stopReplica(r) {
  r.proc.kill('SIGTERM');
  const t = setTimeout(() => r.proc.kill('SIGKILL'), 10_000);
  const { code, signal } = await r.exited;
  clearTimeout(t);
  assert.equal(code, 0, `${r.name} exited with ${code ?? signal} after SIGTERM:\n${r.log().slice(-2000)}`);
}

// ---- /metrics ----
async function scrape(r) {
  const text = await (await fetch(`${r.url}/metrics`)).text();
  const value = (name) => {
    const m = text.match(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm'));
    assert.ok(m, `${r.name}: ${name} not in /metrics`);
    return Number(m[1]);
  };
  const info = text.match(/^vllm:cache_config_info\{block_size="(\d+)",num_gpu_blocks="(\d+)"\}/m);
  assert.ok(info, `${r.name}: vllm:cache_config_info not in /metrics`);
  return {
    waiting: value('vllm:num_requests_waiting'), running: value('vllm:num_requests_running'),
    kvUsage: value('vllm:kv_cache_usage_perc'), blockSize: Number(info[1]), numBlocks: Number(info[2]),
    prompt: value('npullm_prompt_tokens_total'), cached: value('npullm_cached_prompt_tokens_total'),
  };
}

// ---- deterministic randomness ----
function rng(seed) {  // mulberry32
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// ---- the picker model ----
function readPickerConfig(file) {
  const y = fs.readFileSync(file, 'utf8');
  const weights = {};
  for (const m of y.matchAll(/pluginRef:\s*(\S+)\s*\n\s*weight:\s*(\d+(?:\.\d+)?)/g)) weights[m[1]] = Number(m[2]);
  const num = (key) => { const m = y.match(new RegExp(`${key}:\\s*(\\d+)`)); assert.ok(m, `${file}: no ${key}`); return Number(m[1]); };
  for (const k of ['queue-scorer', 'kv-cache-utilization-scorer', 'prefix-cache-scorer']) assert.ok(k in weights, `${file}: no weight for ${k}`);
  return { weights, blockChars: num('blockSize'), lruCapacity: num('lruCapacityPerServer'), maxBlocks: 256 };
}

class PickerModel {
  constructor(config, endpoints, seed) {
    this.c = config;
    this.endpoints = endpoints;
    this.rand = rng(seed);
    this.lru = new Map(endpoints.map((e) => [e.name, new Map()]));  // per endpoint: hash -> true, oldest first
    this.holders = new Map();  // hash -> Set of endpoint names
  }
  hashes(model, messages) {
    const h64 = (buf) => crypto.createHash('sha256').update(buf).digest().subarray(0, 8);
    let input = Buffer.from(JSON.stringify(messages));
    if (input.length < this.c.blockChars) return [];
    input = input.subarray(0, this.c.blockChars * this.c.maxBlocks);
    const out = [];
    let prev = h64(Buffer.from(model));
    for (let i = 0; i + this.c.blockChars <= input.length; i += this.c.blockChars) {
      prev = h64(Buffer.concat([input.subarray(i, i + this.c.blockChars), prev]));
      out.push(prev.toString('hex'));
    }
    return out;
  }
  // Scores every endpoint from its metrics (scraped just now) and picks the best; records the pick.
  pick(hashes, metrics) {
    const w = this.c.weights;
    const queues = metrics.map((m) => m.waiting);
    const qmin = Math.min(...queues), qmax = Math.max(...queues);
    const scored = this.endpoints.map((e, i) => {
      let match = 0;
      for (const h of hashes) { if (this.holders.get(h)?.has(e.name)) match++; else break; }
      const queue = qmax === qmin ? 1 : (qmax - metrics[i].waiting) / (qmax - qmin);
      const kv = 1 - metrics[i].kvUsage;
      const prefix = hashes.length ? match / hashes.length : 0;
      return { e, score: w['queue-scorer'] * queue + w['kv-cache-utilization-scorer'] * kv + w['prefix-cache-scorer'] * prefix, prefix };
    });
    for (let i = scored.length - 1; i > 0; i--) {  // shuffle, then a stable sort: random among equals
      const j = Math.floor(this.rand() * (i + 1));
      [scored[i], scored[j]] = [scored[j], scored[i]];
    }
    scored.sort((a, b) => b.score - a.score);
    this.record(hashes, scored[0].e);
    return scored[0];
  }
  record(hashes, e) {
    const lru = this.lru.get(e.name);
    for (const h of hashes) {
      lru.delete(h);
      lru.set(h, true);
      if (!this.holders.has(h)) this.holders.set(h, new Set());
      this.holders.get(h).add(e.name);
      if (lru.size > this.c.lruCapacity) {
        const old = lru.keys().next().value;
        lru.delete(old);
        const s = this.holders.get(old);
        s.delete(e.name);
        if (!s.size) this.holders.delete(old);
      }
    }
  }
}

// ---- the workload: PROMPTS long system prompts, REQUESTS users with short questions ----
const WORDS = ('answer account billing customer order refund policy shipping delivery return warranty product service ' +
  'support ticket priority urgent normal escalate manager team member schedule weekday weekend holiday morning ' +
  'evening always never politely briefly clearly check verify confirm identity address email phone number invoice ' +
  'payment card bank transfer balance credit debit monthly yearly plan upgrade downgrade cancel renew discount code ' +
  'coupon gift price tax region country language english french german spanish italian store online branch open ' +
  'closed hours minutes days weeks item size color stock available missing damaged broken replace repair technician ' +
  'visit appointment note record history previous current future request response message chat call wait queue ' +
  'transfer handle resolve issue problem question topic rule exception limit maximum minimum amount value the a an ' +
  'of to in for with on at by from and or but if then when must should may not do does is are be').split(' ');
const TOPICS = ['billing', 'shipping', 'returns', 'warranty', 'accounts', 'repairs', 'travel', 'insurance', 'banking',
  'telecom', 'energy', 'housing'];

function workload(seed) {
  const r = rng(seed);
  const word = () => WORDS[Math.floor(r() * WORDS.length)];
  const systems = [];
  for (let k = 0; k < PROMPTS; k++) {
    const rules = [];
    for (let n = 0; n < SYSTEM_WORDS;) {
      const len = 8 + Math.floor(r() * 10);
      const s = Array.from({ length: len }, word).join(' ');
      rules.push(s[0].toUpperCase() + s.slice(1) + '.');
      n += len;
    }
    systems.push(`You are the ${TOPICS[k % TOPICS.length]} desk assistant (desk ${k + 1}) of Example Corp. Follow these rules. ${rules.join(' ')}`);
  }
  const requests = [];
  for (let i = 0; i < REQUESTS; i++) {
    const sys = Math.floor(r() * PROMPTS);
    const q = Array.from({ length: 6 }, word).join(' ');
    requests.push({ i, sys, messages: [{ role: 'system', content: systems[sys] }, { role: 'user', content: `I am user ${i + 1}. ${q}?` }] });
  }
  return requests;
}

// ---- one run: fresh replicas, warm-up, the workload under one routing ----
async function chat(client, model, messages) {
  const t0 = performance.now();
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: MAX_TOKENS, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let ttft = null, usage = null, finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices?.[0];
    if (c?.delta?.content && ttft === null) ttft = performance.now() - t0;
    if (c?.finish_reason) { finish = c.finish_reason; if (ttft === null) ttft = performance.now() - t0; }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.ok(finish, 'stream ended without a finish reason');
  assert.ok(usage && usage.prompt_tokens_details, `no usage with prompt_tokens_details: ${JSON.stringify(usage)}`);
  return { ttft, total: performance.now() - t0, usage };
}

async function run(routing, requests, cache, pickerConfig) {
  // Replica 0 first (it compiles the blobs into the shared cache on the first run), then the others.
  const replicas = [await startReplica(cache, `${routing}-0`)];
  await waitReady(replicas[0]);
  const rest = await Promise.all([1, 2].map((i) => startReplica(cache, `${routing}-${i}`)));
  replicas.push(...rest);
  await Promise.all(rest.map(waitReady));
  const clients = replicas.map((r) => new OpenAI({ baseURL: `${r.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 }));
  const model = (await clients[0].models.list()).data[0].id;

  // Warm-up: PARALLEL requests at once on each replica, prompts as long as the workload's and sharing
  // nothing with it, so that first-use costs are not counted. The counters' baseline is taken after it.
  const warm = workload(SEED + 1000).slice(0, PARALLEL).map((w) => [{ role: 'system', content: `Warm-up. ${w.messages[0].content}` }, w.messages[1]]);
  await Promise.all(clients.flatMap((c) => warm.map((m) => chat(c, model, m))));
  const before = await Promise.all(replicas.map(scrape));

  const picker = routing === 'picker' ? new PickerModel(pickerConfig, replicas, SEED) : null;
  let rr = 0, next = 0, lock = Promise.resolve();
  const results = [];
  const route = async (req) => {
    if (!picker) return rr++ % REPLICAS;
    const metrics = await Promise.all(replicas.map(scrape));  // live, right before the decision
    const best = picker.pick(picker.hashes(model, req.messages), metrics);
    return replicas.indexOf(best.e);
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < requests.length) {
      const req = requests[next++];
      const decided = lock.then(() => route(req));  // one routing decision at a time, in order
      lock = decided.catch(() => {});
      const at = await decided;
      const res = await chat(clients[at], model, req.messages);
      results.push({ ...res, replica: at, sys: req.sys });
    }
  }));
  const wall = (performance.now() - t0) / 1000;
  const after = await Promise.all(replicas.map(scrape));
  await Promise.all(replicas.map(stopReplica));

  const sum = (a, f) => a.reduce((s, x) => s + f(x), 0);
  const dPrompt = sum(after.map((a, i) => a.prompt - before[i].prompt), (x) => x);
  const dCached = sum(after.map((a, i) => a.cached - before[i].cached), (x) => x);
  const uPrompt = sum(results, (r) => r.usage.prompt_tokens);
  const uCached = sum(results, (r) => r.usage.prompt_tokens_details.cached_tokens);
  assert.equal(results.length, requests.length);
  assert.equal(dPrompt, uPrompt, `${routing}: the servers counted ${dPrompt} prompt tokens, the responses ${uPrompt}`);
  assert.equal(dCached, uCached, `${routing}: the servers counted ${dCached} cached tokens, the responses ${uCached}`);
  const ttfts = results.map((r) => r.ttft).sort((a, b) => a - b);
  const perReplica = replicas.map((_, i) => results.filter((r) => r.replica === i).length);
  const hitRequests = results.filter((r) => r.usage.prompt_tokens_details.cached_tokens * 2 >= r.usage.prompt_tokens).length;
  return {
    routing, requests: results.length, hitRate: dCached / dPrompt, cachedTokens: dCached, promptTokens: dPrompt,
    hitRequests, ttftP50: percentile(ttfts, 50), ttftP99: percentile(ttfts, 99), wallS: wall,
    genTokS: sum(results, (r) => r.usage.completion_tokens) / wall, reqS: results.length / wall, perReplica,
    promptsPerReplica: replicas.map((_, i) => new Set(results.filter((r) => r.replica === i).map((r) => r.sys)).size),
  };
}

main(async () => {
  const pickerConfig = readPickerConfig(PICKER_CONFIG);
  const tmp = tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'npullm-fleet-'));
  try {
    const requests = workload(SEED);
    console.log(`workload: ${REQUESTS} requests, ${PROMPTS} system prompts, ${CONCURRENCY} in flight, max_tokens ${MAX_TOKENS}; ` +
      `${REPLICAS} replicas x --parallel ${PARALLEL} -t ${THREADS}; picker model weights ${JSON.stringify(pickerConfig.weights)}, ` +
      `blocks of ${pickerConfig.blockChars} characters, LRU ${pickerConfig.lruCapacity} per replica`);
    const cache = path.join(tmp, 'cache');
    const rows = [];
    for (const routing of ['round-robin', 'picker']) rows.push(await run(routing, requests, cache, pickerConfig));

    const pct = (x) => `${(100 * x).toFixed(1)} %`;
    const ms = (x) => `${x.toFixed(0)} ms`;
    const header = ['routing', 'requests', 'prefix hit rate', 'cached / prompt tokens', 'hit requests', 'TTFT p50', 'TTFT p99',
      'gen tok/s', 'req/s', 'requests per replica', 'prompts per replica'];
    const table = rows.map((r) => [r.routing, String(r.requests), pct(r.hitRate), `${r.cachedTokens} / ${r.promptTokens}`,
      `${r.hitRequests}`, ms(r.ttftP50), ms(r.ttftP99), r.genTokS.toFixed(1), r.reqS.toFixed(2), r.perReplica.join(' / '),
      r.promptsPerReplica.join(' / ')]);
    console.log(`\n| ${header.join(' | ')} |\n|${header.map(() => '---').join('|')}|`);
    for (const t of table) console.log(`| ${t.join(' | ')} |`);
    console.log();
    if (process.env.NPULLM_FLEET_JSON) fs.writeFileSync(process.env.NPULLM_FLEET_JSON, JSON.stringify(rows, null, 2));

    const [rrRow, pk] = rows;
    assert.ok(pk.hitRate > rrRow.hitRate, `picker model's prefix hit rate ${pct(pk.hitRate)} is not above round-robin's ${pct(rrRow.hitRate)}`);
    assert.ok(pk.ttftP50 < rrRow.ttftP50, `picker model's TTFT p50 ${ms(pk.ttftP50)} is not below round-robin's ${ms(rrRow.ttftP50)}`);
  } finally {
    killAll();
  }
});
