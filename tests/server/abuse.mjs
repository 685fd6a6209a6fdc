// The server under abuse (issue 12, item 4), on loopback only, every loop bounded in time: slow
// clients that trickle headers (slowloris), idle connections beyond the thread pool, clients that
// never read their stream, clients that vanish mid-stream (and mid-wait), bodies that lie about
// their length, deeply nested JSON, huge `stop` lists, and more requests than the slots can serve.
// During each abuse a well-formed request is timed: it must be answered (200; 503 + Retry-After
// only in the flood case) within LATENCY_BOUND_MS. Afterwards every slot is free, nothing waits,
// and the server's resident memory has not grown by more than RSS_GROWTH_KIB, nor by more than
// RSS_REPEAT_KIB when the heaviest case runs again.
//
// env: NPULLM_URL, NPULLM_SERVER_PID (for the VmRSS check), optional NPULLM_API_KEY. The server is
// started by run.sh with --parallel 4 --max-queue 16 --read-timeout 3 --write-timeout 3 (the other
// limits at their defaults).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { assertErrorBody, authHeaders, baseUrl, deadline, main, sleep } from './lib.mjs';

// Under a sanitizer (NPULLM_SANITIZER, the ThreadSanitizer run of scripts/test.sh) the server runs
// several times slower and holds its shadow memory: the bounds on time are tripled and the RSS
// bounds are not checked; every other check stands.
const SANITIZER = process.env.NPULLM_SANITIZER || '';
deadline(SANITIZER ? 330_000 : 110_000);
const URL_ = baseUrl();
const PORT = Number(new URL(URL_).port);
const PID = process.env.NPULLM_SERVER_PID;
const LATENCY_BOUND_MS = SANITIZER ? 15000 : 5000;
const RSS_GROWTH_KIB = 128 * 1024;  // over the whole abuse (malloc arenas of many threads)
const RSS_REPEAT_KIB = 16 * 1024;   // over a repeat of the heaviest case: no growth without bound
const READ_TIMEOUT_MS = 3000;  // the server's --read-timeout (run.sh)

function rssKiB() {
  if (!PID || SANITIZER) return null;
  const m = fs.readFileSync(`/proc/${PID}/status`, 'utf8').match(/^VmRSS:\s+(\d+)\s+kB/m);
  return m ? Number(m[1]) : null;
}

// A raw connection that never throws: its errors (resets, the server cutting it) are recorded.
function connect() {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port: PORT });
    s.closedAt = null;
    s.received = '';
    s.on('error', () => {});
    s.on('close', () => { s.closedAt = performance.now(); });
    s.resume();  // flowing: what the server sends is read (and dropped), so its close is seen
    s.once('connect', () => resolve(s));
    s.once('error', () => resolve(s));
  });
}

function collect(s) {
  s.setEncoding('latin1');
  s.on('data', (d) => { if (s.received.length < 1 << 16) s.received += d; });
  return s;
}

const postHead = (path, len, extra = '') =>
  `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${extra}Content-Length: ${len}\r\n\r\n`;

// The well-formed request timed during each abuse: a short greedy completion on a fresh connection.
async function probe(allow503 = false) {
  const t = performance.now();
  const res = await fetch(`${URL_}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Connection: 'close', ...authHeaders() },
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 8, temperature: 0 }),
    signal: AbortSignal.timeout(30_000),
  });
  const body = await res.json();
  const ms = performance.now() - t;
  if (res.status === 503 && allow503) {
    assert.ok(res.headers.get('retry-after'), '503 without Retry-After');
    assertErrorBody(body, 'probe 503');
  } else {
    assert.equal(res.status, 200, `probe: status ${res.status}: ${JSON.stringify(body)}`);
    assert.ok(typeof body.choices?.[0]?.text === 'string', `probe: no text in ${JSON.stringify(body)}`);
  }
  return { status: res.status, ms };
}

// Runs `abuse` (which returns a stop function, or a promise of one), probes 3 times while it runs,
// stops it, and reports the probes' latencies.
const report = [];
async function during(name, abuse, { allow503 = false, settle = 300 } = {}) {
  const stop = await abuse();
  await sleep(settle);
  const probes = [];
  for (let i = 0; i < 3; i++) {
    probes.push(await probe(allow503));
    await sleep(200);
  }
  const extra = (await stop()) || {};
  const worst = Math.max(...probes.map((p) => p.ms));
  const line = { case: name, probe_ms: probes.map((p) => Math.round(p.ms)), statuses: probes.map((p) => p.status), ...extra };
  console.log(`  ${JSON.stringify(line)}`);
  report.push(line);
  assert.ok(worst < LATENCY_BOUND_MS, `${name}: a well-formed request took ${Math.round(worst)} ms (bound ${LATENCY_BOUND_MS} ms)`);
  if (!allow503) assert.ok(probes.every((p) => p.status === 200), `${name}: probes ${JSON.stringify(probes)}`);
}

async function json(path) {
  const r = await fetch(`${URL_}${path}`, { headers: authHeaders() });
  assert.equal(r.status, 200, `GET ${path}`);
  return r.json();
}

// Every slot idle and nothing queued, within `ms`.
async function slotsFree(what, ms = 8000) {
  const until = performance.now() + ms;
  let s;
  for (;;) {
    s = await json('/slots');
    if (s.queue === 0 && s.slots.every((x) => x.state === 'idle')) return s;
    if (performance.now() > until) throw new Error(`${what}: slots still busy after ${ms} ms: ${JSON.stringify(s.slots.map((x) => x.state))}, queue ${s.queue}`);
    await sleep(100);
  }
}

const destroyAll = (socks) => { for (const s of socks) s.destroy(); };

main(async () => {
  await probe();  // warm: the first request's allocations are not growth
  const rssBefore = rssKiB();
  if (SANITIZER) console.warn(`RSS checks skipped under ${SANITIZER}`);

  // 1. Slowloris: 200 connections each trickling its headers, a byte every 250 ms. The server
  // must cut them (after --read-timeout, sooner when they crowd out others).
  await during('slowloris', async () => {
    const socks = await Promise.all(Array.from({ length: 200 }, () => connect()));
    const head = postHead('/v1/completions', 2) + '{}';
    let i = 0;
    const timer = setInterval(() => {
      for (const s of socks) if (!s.closedAt && !s.destroyed) s.write(head[i % head.length]);
      i++;
    }, 250);
    const t0 = performance.now();
    return async () => {
      // Within the read time-out (plus the watchdog's tick) every one of them is cut.
      const until = t0 + READ_TIMEOUT_MS + 2000;
      while (socks.some((s) => !s.closedAt) && performance.now() < until) await sleep(100);
      clearInterval(timer);
      const open = socks.filter((s) => !s.closedAt).length;
      destroyAll(socks);
      assert.equal(open, 0, `slowloris: ${open} of 200 trickling connections still open after ${READ_TIMEOUT_MS + 2000} ms`);
      return { connections: 200, cut_within_ms: Math.round(Math.max(...socks.map((s) => s.closedAt ?? performance.now())) - t0) };
    };
  });

  // 2. Idle connections, more than the thread pool: 400 that connect and send nothing, each
  // reconnecting when cut, for as long as the probes run.
  await during('idle connections', async () => {
    let live = true, reconnects = 0;
    const socks = [];
    const keep = async (k) => {
      while (live) {
        const s = await connect();
        socks[k] = s;
        while (live && !s.closedAt) await sleep(50);
        reconnects++;
      }
    };
    const loops = Array.from({ length: 400 }, (_, k) => keep(k));
    await sleep(500);
    return async () => {
      live = false;
      destroyAll(socks);
      await Promise.all(loops);
      return { connections: 400, reconnects };
    };
  });

  // 3. Clients that never read their stream: 8 streaming requests whose sockets are paused.
  await during('never read the stream', async () => {
    const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 200, stream: true });
    const socks = await Promise.all(Array.from({ length: 8 }, () => connect()));
    for (const s of socks) { s.pause(); s.write(postHead('/v1/completions', Buffer.byteLength(body)) + body); }
    return async () => { destroyAll(socks); await slotsFree('never read the stream'); return { clients: 8 }; };
  });

  // 4. Clients that vanish: 8 streams reset after their first bytes, 4 non-streamed requests
  // closed right after sending, repeated while the probes run.
  await during('clients vanish mid-stream', async () => {
    let live = true, vanished = 0;
    const streamBody = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 200, stream: true });
    const plainBody = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 200 });
    const one = async (stream) => {
      while (live) {
        const s = collect(await connect());
        const b = stream ? streamBody : plainBody;
        s.write(postHead('/v1/completions', Buffer.byteLength(b)) + b);
        if (stream) { const until = performance.now() + 3000; while (!s.received && performance.now() < until) await sleep(10); } else await sleep(50);
        stream ? s.resetAndDestroy() : s.destroy();
        vanished++;
        await sleep(100);
      }
    };
    const loops = [...Array.from({ length: 8 }, () => one(true)), ...Array.from({ length: 4 }, () => one(false))];
    return async () => { live = false; await Promise.all(loops); await slotsFree('clients vanish'); return { vanished }; };
  });

  // 5. Bodies that lie about their length. Longer announced than sent: 50 connections wait for
  // bytes that never come, and are cut. Shorter: the surplus is a broken next request (400).
  await during('Content-Length lies', async () => {
    const t0 = performance.now();
    const longer = await Promise.all(Array.from({ length: 50 }, () => connect()));
    for (const s of longer) s.write(postHead('/v1/completions', 100000) + '{"prompt":"Once');
    const shorter = collect(await connect());
    const b = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 4 });
    shorter.write(postHead('/v1/completions', 5) + b);
    return async () => {
      const until = t0 + READ_TIMEOUT_MS + 2000;
      while ((longer.some((s) => !s.closedAt) || !shorter.closedAt) && performance.now() < until) await sleep(100);
      const open = longer.filter((s) => !s.closedAt).length;
      destroyAll(longer);
      shorter.destroy();
      assert.equal(open, 0, `${open} of 50 connections with a too-large Content-Length still open`);
      assert.match(shorter.received, /^HTTP\/1\.1 400 /, `a too-small Content-Length: ${shorter.received.slice(0, 200)}`);
      return { longer_cut_within_ms: Math.round(Math.max(...longer.map((s) => s.closedAt)) - t0), shorter: shorter.received.slice(9, 12) };
    };
  });

  // 6. Deeply nested JSON: 100k '[' (balanced and not), 100k '{"a":', each answered 400 at once.
  await during('deeply nested JSON', async () => {
    const bodies = ['['.repeat(100000) + ']'.repeat(100000), '['.repeat(100000), '{"a":'.repeat(100000) + '1' + '}'.repeat(100000),
      `{"prompt":"hi","x":${'['.repeat(65)}${']'.repeat(65)}}`];
    const times = [];
    for (const body of bodies) {
      const t = performance.now();
      const r = await fetch(`${URL_}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...authHeaders() }, body });
      times.push(Math.round(performance.now() - t));
      assert.equal(r.status, 400, `nested body of ${body.length} bytes: status ${r.status}`);
      assertErrorBody(await r.json(), 'nested JSON');
    }
    // Meanwhile, more of them from 4 clients in a loop.
    let live = true;
    const loops = Array.from({ length: 4 }, async () => {
      while (live) await fetch(`${URL_}/v1/chat/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...authHeaders() }, body: bodies[0] }).then((r) => r.text());
    });
    return async () => { live = false; await Promise.all(loops); return { answer_400_ms: times }; };
  });

  // 7. Huge stop lists: 100k stop strings, 4 stop strings of 512 KiB each, both 400; in a loop.
  const hugeStops = async () => {
    const many = JSON.stringify({ prompt: 'hi', max_tokens: 4, stop: Array.from({ length: 100000 }, (_, i) => `s${i}`) });
    const long = JSON.stringify({ prompt: 'hi', max_tokens: 4, stop: Array.from({ length: 4 }, () => 'x'.repeat(512 << 10)) });
    for (const body of [many, long]) {
      const r = await fetch(`${URL_}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...authHeaders() }, body });
      assert.equal(r.status, 400, `stop list of ${body.length} bytes: status ${r.status}`);
      assertErrorBody(await r.json(), 'stop list');
    }
    let live = true, sent = 0;
    const loops = Array.from({ length: 4 }, async (_, k) => {
      while (live) {
        await fetch(`${URL_}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...authHeaders() }, body: k % 2 ? many : long }).then((r) => r.text());
        sent++;
      }
    });
    return async () => { live = false; await Promise.all(loops); return { sent }; };
  };
  await during('huge stop lists', hugeStops);

  // 8. More requests than the slots and the queue hold (4 + 16): 48 clients each firing request
  // after request without pause (64 tokens each); 503s with Retry-After are the server's deliberate
  // answer, and some requests must still be served.
  await during('flood above the slots', async () => {
    let live = true;
    const counts = { 200: 0, 503: 0, other: 0 };
    const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 64 });
    const loops = Array.from({ length: 48 }, async () => {
      while (live) {
        const r = await fetch(`${URL_}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...authHeaders() }, body });
        await r.text();
        counts[r.status in counts ? r.status : 'other']++;
      }
    });
    return async () => {
      live = false;
      await Promise.all(loops);
      assert.equal(counts.other, 0, `flood: unexpected statuses ${JSON.stringify(counts)}`);
      assert.ok(counts[200] > 0 && counts[503] > 0, `flood: expected both served and refused requests: ${JSON.stringify(counts)}`);
      return { answered: counts };
    };
  }, { allow503: true });

  // Afterwards: every slot free, nothing queued, connections back to the probes' own, memory bounded.
  await sleep(500);
  const s = await slotsFree('after the abuse');
  const metrics = await (await fetch(`${URL_}/metrics`, { headers: authHeaders() })).text();
  assert.match(metrics, /^npullm_busy_slots 0$/m, 'metrics: busy slots after the abuse');
  assert.match(metrics, /^npullm_queue_length 0$/m, 'metrics: queue after the abuse');
  await sleep(300);
  const rssAfter = rssKiB();
  console.log(`  ${JSON.stringify({ connections: s.connections, rss_before_kib: rssBefore, rss_after_kib: rssAfter })}`);
  if (rssBefore !== null && rssAfter !== null)
    assert.ok(rssAfter - rssBefore < RSS_GROWTH_KIB, `RSS grew from ${rssBefore} to ${rssAfter} KiB`);
  // The heaviest case again: what memory it took the first time is reused, not added to.
  await during('huge stop lists (again)', hugeStops);
  await sleep(300);
  const rssAgain = rssKiB();
  console.log(`  ${JSON.stringify({ rss_after_repeat_kib: rssAgain })}`);
  if (rssAfter !== null && rssAgain !== null && rssAgain - rssAfter >= RSS_REPEAT_KIB) {
    // A repeat may land on HTTP threads whose malloc arenas had not held such bodies yet (seen
    // under parallel ctest load: +19.5 and +19.8 MiB once each); a leak grows again on the next
    // repeat by as much, reused memory does not.
    await during('huge stop lists (a third time)', hugeStops);
    await sleep(300);
    const rssThird = rssKiB();
    console.log(`  ${JSON.stringify({ rss_after_second_repeat_kib: rssThird })}`);
    assert.ok(rssThird - rssAgain < RSS_REPEAT_KIB,
      `RSS grew from ${rssAfter} to ${rssAgain} and then to ${rssThird} KiB on repeats of the heaviest case`);
  }
  assert.ok(s.connections.open <= 2, `connections still open: ${JSON.stringify(s.connections)}`);
});
