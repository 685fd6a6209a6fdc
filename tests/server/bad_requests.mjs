// Bad requests get a 4xx with an OpenAI error body, and the server keeps answering /health
// after every one. With NPULLM_API_KEY set it also checks the API-key rules.
//
// env: NPULLM_URL, optional NPULLM_API_KEY (the server was started with --api-key that value).
import assert from 'node:assert/strict';
import net from 'node:net';
import { assertErrorBody, authHeaders, baseUrl, deadline, main } from './lib.mjs';

deadline(120_000);
const URL_ = baseUrl();
const KEY = process.env.NPULLM_API_KEY;
const CHAT = '/v1/chat/completions';
const msgs = [{ role: 'user', content: 'Hi' }];
const chat = (extra) => ({ messages: msgs, max_tokens: 4, ...extra });

// [name, method, path, body (object → JSON, string/Buffer → as is), expected status, headers]
const CASES = [
  ['malformed JSON', 'POST', CHAT, '{"messages": [', 400],
  ['body is an array', 'POST', CHAT, '[]', 400],
  ['body is a number', 'POST', CHAT, '42', 400],
  ['body is empty', 'POST', CHAT, '', 400],
  ['missing messages', 'POST', CHAT, { max_tokens: 4 }, 400],
  ['messages not an array', 'POST', CHAT, { messages: 'Hi' }, 400],
  ['messages empty', 'POST', CHAT, { messages: [] }, 400],
  ['message not an object', 'POST', CHAT, { messages: ['Hi'] }, 400],
  ['message without role', 'POST', CHAT, { messages: [{ content: 'Hi' }] }, 400],
  ['message with unknown role', 'POST', CHAT, { messages: [{ role: 'wizard', content: 'Hi' }] }, 400],
  ['content is a number', 'POST', CHAT, { messages: [{ role: 'user', content: 42 }] }, 400],
  ['content part is not text', 'POST', CHAT, { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://127.0.0.1/x.png' } }] }] }, 400],
  ['temperature is a string', 'POST', CHAT, chat({ temperature: 'hot' }), 400],
  ['temperature negative', 'POST', CHAT, chat({ temperature: -0.5 }), 400],
  ['temperature > 2', 'POST', CHAT, chat({ temperature: 2.5 }), 400],
  ['top_p > 1', 'POST', CHAT, chat({ top_p: 1.5 }), 400],
  ['top_p < 0', 'POST', CHAT, chat({ top_p: -0.1 }), 400],
  ['max_tokens negative', 'POST', CHAT, chat({ max_tokens: -5 }), 400],
  ['max_tokens zero', 'POST', CHAT, chat({ max_tokens: 0 }), 400],
  ['max_tokens absurd', 'POST', CHAT, chat({ max_tokens: 1e12 }), 400],
  ['max_tokens not an integer', 'POST', CHAT, chat({ max_tokens: 1.5 }), 400],
  ['max_completion_tokens a string', 'POST', CHAT, { messages: msgs, max_completion_tokens: '10' }, 400],
  ['stop with 5 strings', 'POST', CHAT, chat({ stop: ['a', 'b', 'c', 'd', 'e'] }), 400],
  ['stop with a non-string', 'POST', CHAT, chat({ stop: ['a', 7] }), 400],
  ['stop is a number', 'POST', CHAT, chat({ stop: 7 }), 400],
  ['n = 2', 'POST', CHAT, chat({ n: 2 }), 400],
  ['unknown model', 'POST', CHAT, chat({ model: 'no-such-model' }), 404],
  ['invalid UTF-8 in a string', 'POST', CHAT, Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"a'), Buffer.from([0xff, 0xfe]), Buffer.from('b"}],"max_tokens":4}')]), 400],
  ['GET on an unknown route', 'GET', '/v1/nope', undefined, 404],
  ['POST on an unknown route', 'POST', '/v1/embeddings', { input: 'x' }, 404],
  ['completions without prompt', 'POST', '/v1/completions', { max_tokens: 4 }, 400],
  ['completions prompt is a number', 'POST', '/v1/completions', { prompt: 42, max_tokens: 4 }, 400],
  ['text/plain non-JSON', 'POST', CHAT, 'hello there', 400, { 'Content-Type': 'text/plain' }],
  ['stream not a boolean', 'POST', CHAT, chat({ stream: 'yes' }), 400],
  ['seed not an integer', 'POST', CHAT, chat({ seed: 1.5 }), 400],
  ['seed a string', 'POST', CHAT, chat({ seed: 'abc' }), 400],
  ['presence_penalty > 2', 'POST', CHAT, chat({ presence_penalty: 3 }), 400],
  ['frequency_penalty < -2', 'POST', CHAT, chat({ frequency_penalty: -3 }), 400],
  ['completions temperature > 2', 'POST', '/v1/completions', { prompt: 'Hi', max_tokens: 4, temperature: 9 }, 400],
];

// Requests that are fine: unknown keys are ignored; logprobs may be ignored (200) or refused as
// unsupported (400 with an error body), either is accepted; tools are served (structured.mjs).
const LENIENT = [
  ['unknown key ignored', chat({ npullm_no_such_field: { a: 1 } }), [200]],
  ['logprobs', chat({ logprobs: true }), [200, 400]],
  ['tools', chat({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }] }), [200]],
  ['n = 1', chat({ n: 1 }), [200]],
  ['stop as one string', chat({ stop: '\n\n' }), [200]],
  ['content as text parts', { messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }], max_tokens: 4 }, [200]],
];

async function request(method, path, body, headers = {}) {
  const isRaw = typeof body === 'string' || Buffer.isBuffer(body);
  const res = await fetch(URL_ + path, {
    method,
    headers: { ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}), ...authHeaders(), ...headers },
    body: body === undefined ? undefined : isRaw ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* checked by the caller */ }
  return { status: res.status, headers: res.headers, text, json };
}

async function expectHealthy(after) {
  let res;
  try {
    res = await fetch(`${URL_}/health`);
  } catch (e) {
    throw new Error(`/health unreachable after "${after}": ${e.cause?.code ?? e.message}`);
  }
  assert.equal(res.status, 200, `/health after "${after}"`);
  assert.deepEqual(await res.json(), { status: 'ok' }, `/health body after "${after}"`);
}

// Decodes a chunked HTTP body (only as much as arrived).
function dechunk(s) {
  let out = '';
  for (;;) {
    const eol = s.indexOf('\r\n');
    const n = parseInt(s.slice(0, eol), 16);
    if (eol < 0 || !(n > 0)) return out;
    out += s.slice(eol + 2, eol + 2 + n);
    s = s.slice(eol + 2 + n + 2);
  }
}

// Sends a 10 MiB body over a raw socket and returns the status line's code. A server may answer
// 413 as soon as it sees Content-Length and close while we are still writing; fetch would then
// report a reset instead of the answer, so write in pieces and stop as soon as a response arrives.
function oversized(path, size = 10 * 1024 * 1024) {
  const { hostname, port } = new URL(URL_);
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: hostname, port: Number(port) });
    let got = '', answered = false;
    const finishWith = (why) => {
      const m = got.match(/^HTTP\/1\.[01] (\d{3})[^\r\n]*\r\n([\s\S]*?)\r\n\r\n([\s\S]*)$/);
      if (!m) return reject(new Error(`no HTTP response to a ${size}-byte body (${why}); got ${JSON.stringify(got.slice(0, 200))}`));
      answered = true;
      sock.destroy();
      let body = m[3];
      if (/\r\ntransfer-encoding:\s*chunked/i.test(`\r\n${m[2]}`)) body = dechunk(body);
      resolve({ status: Number(m[1]), head: m[2], body });
    };
    sock.setTimeout(30_000, () => finishWith('timeout'));
    sock.on('data', (d) => {
      got += d.toString('latin1');
      const head = got.indexOf('\r\n\r\n');
      const len = got.match(/\r\ncontent-length:\s*(\d+)/i);
      if (head >= 0 && len && got.length - head - 4 >= Number(len[1])) finishWith('complete');
    });
    sock.on('error', (e) => { if (!answered) (got ? finishWith(e.code) : reject(new Error(`10 MiB body: ${e.code} before any response; the server should read and discard the body, then answer 413`))); });
    sock.on('close', () => { if (!answered) finishWith('closed'); });
    sock.on('connect', async () => {
      const auth = KEY ? `Authorization: Bearer ${KEY}\r\n` : '';
      sock.write(`POST ${path} HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/json\r\n${auth}Content-Length: ${size}\r\nConnection: close\r\n\r\n`);
      const piece = Buffer.alloc(64 * 1024, 0x20);
      piece.write('{"messages":[{"role":"user","content":"');
      for (let sent = 0; sent < size && !answered && !sock.destroyed; sent += piece.length) {
        const part = sent + piece.length > size ? piece.subarray(0, size - sent) : piece;
        if (!sock.write(part)) await new Promise((r) => { sock.once('drain', r); sock.once('close', r); });
      }
    });
  });
}

main(async () => {
  await expectHealthy('start');
  let n = 0;
  for (const [name, method, path, body, status, headers] of CASES) {
    const r = await request(method, path, body, headers);
    assert.equal(r.status, status, `${name}: expected ${status}, got ${r.status}: ${r.text.slice(0, 300)}`);
    assert.ok(r.json, `${name}: body is not JSON: ${r.text.slice(0, 300)}`);
    assertErrorBody(r.json, name);
    await expectHealthy(name);
    n++;
  }

  const big = await oversized(CHAT);
  assert.equal(big.status, 413, `10 MiB body: expected 413, got ${big.status}`);
  let bigJson = null;
  try { bigJson = JSON.parse(big.body); } catch { /* reported below */ }
  assertErrorBody(bigJson, '10 MiB body');
  await expectHealthy('10 MiB body');
  n++;

  for (const [name, body, allowed] of LENIENT) {
    const r = await request('POST', CHAT, body);
    assert.ok(allowed.includes(r.status), `${name}: expected ${allowed.join(' or ')}, got ${r.status}: ${r.text.slice(0, 300)}`);
    if (r.status === 200) assert.equal(r.json?.object, 'chat.completion', `${name}: a chat.completion`);
    else assertErrorBody(r.json, name);
    await expectHealthy(name);
  }

  if (KEY) {
    // /health and / stay open; the API, /slots and /metrics need the key.
    for (const path of ['/health', '/']) {
      const r = await fetch(URL_ + path);
      assert.equal(r.status, 200, `${path} without a key`);
      await r.arrayBuffer();
    }
    const probes = [['GET', '/v1/models'], ['GET', '/slots'], ['GET', '/metrics'], ['POST', CHAT]];
    for (const [method, path] of probes) {
      for (const [what, auth] of [['no key', undefined], ['wrong key', `Bearer ${KEY}-wrong`], ['not Bearer', `Basic ${KEY}`]]) {
        const res = await fetch(URL_ + path, {
          method,
          headers: { 'Content-Type': 'application/json', ...(auth ? { Authorization: auth } : {}) },
          body: method === 'POST' ? JSON.stringify(chat()) : undefined,
        });
        const text = await res.text();
        assert.equal(res.status, 401, `${method} ${path} with ${what}: expected 401, got ${res.status}`);
        let json = null;
        try { json = JSON.parse(text); } catch { /* reported below */ }
        assertErrorBody(json, `${method} ${path} with ${what}`);
        n++;
      }
      const ok = await request(method, path, method === 'POST' ? chat() : undefined);
      assert.equal(ok.status, 200, `${method} ${path} with the right key: ${ok.status} ${ok.text.slice(0, 200)}`);
    }
    await expectHealthy('auth checks');
  }
  console.log(`${n} bad requests answered as expected${KEY ? ' (API key mode)' : ''}`);
});
