// Shared helpers for the `npullm serve` end-to-end scripts: environment, an overall deadline,
// raw SSE reading and small checks. Every script only ever talks to 127.0.0.1.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';

export function env(name, { required = true, fallback } = {}) {
  const v = process.env[name];
  if (v !== undefined && v !== '') return v;
  if (fallback !== undefined) return fallback;
  if (required) die(`environment variable ${name} is not set`);
  return undefined;
}

export function die(msg) {
  console.error(`FAIL ${path.basename(process.argv[1])}: ${msg}`);
  process.exit(1);
}

// The server base URL; refuses anything that is not a loopback address on purpose.
export function baseUrl() {
  const url = env('NPULLM_URL').replace(/\/+$/, '');
  const host = new URL(url).hostname;
  if (host !== '127.0.0.1') die(`NPULLM_URL must point at 127.0.0.1, got ${url}`);
  return url;
}

// Fails the whole script if it has not finished within `ms`; unref() so a passing run exits at once.
export function deadline(ms) {
  setTimeout(() => die(`timed out after ${ms / 1000} s`), ms).unref();
}

// Runs main(), turning any exception (assert included) into a clear failure and exit code 1.
export function main(fn) {
  fn().then(
    () => { console.log(`PASS ${path.basename(process.argv[1])}`); process.exit(0); },
    (e) => die(e && e.stack ? e.stack : String(e)),
  );
}

export function authHeaders() {
  const key = process.env.NPULLM_API_KEY;
  return key ? { Authorization: `Bearer ${key}` } : {};
}

export const modelIdFromPath = (p) => path.basename(p).replace(/\.gguf$/i, '');

// Reads a server-sent-event body and yields each event's data payload (the text after "data:").
export async function* sseData(body) {
  const decoder = new TextDecoder();
  let buf = '';
  for await (const bytes of body) {
    buf += decoder.decode(bytes, { stream: true }).replace(/\r/g, '');
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data) yield data;
    }
  }
  if (buf.trim()) throw new Error(`stream ended inside an event: ${JSON.stringify(buf.slice(0, 200))}`);
}

// Checks an OpenAI-style error body: {"error":{"message": non-empty string, "type": string, ...}}.
export function assertErrorBody(json, what) {
  assert.ok(json && typeof json === 'object' && json.error && typeof json.error === 'object',
    `${what}: body has no "error" object: ${JSON.stringify(json)}`);
  assert.equal(typeof json.error.message, 'string', `${what}: error.message is not a string`);
  assert.ok(json.error.message.length > 0, `${what}: error.message is empty`);
  assert.equal(typeof json.error.type, 'string', `${what}: error.type is not a string`);
}

// Runs `npullm run ... --json` and returns its parsed report. NPULLM_RUN_FLAGS (space-separated)
// is appended so the CLI uses the same runtime options (variants, kv type, cache dir) as the server.
export function runCli(args, timeoutMs = 120_000) {
  const bin = env('NPULLM_BIN');
  const extra = (process.env.NPULLM_RUN_FLAGS || '').split(/\s+/).filter(Boolean);
  const full = ['run', ...args, '--json', ...extra];
  return new Promise((resolve, reject) => {
    execFile(bin, full, { timeout: timeoutMs, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${bin} ${full.join(' ')} failed: ${err.message}\n${stderr}`));
      // The report is the last line that parses as a JSON object.
      const lines = stdout.split('\n').filter((l) => l.trim().startsWith('{'));
      for (let i = lines.length - 1; i >= 0; i--) {
        try { return resolve(JSON.parse(lines[i])); } catch { /* keep looking */ }
      }
      reject(new Error(`${bin} ${full.join(' ')} printed no JSON report:\n${stdout}\n${stderr}`));
    });
  });
}

// The CLI's finish reasons (eos, stop_token, stop_string, length) in OpenAI's two words.
export const openaiFinish = (r) => (r === 'length' ? 'length' : ['eos', 'stop_token', 'stop_string', 'stop'].includes(r) ? 'stop' : r);

export function percentile(sorted, p) {
  if (!sorted.length) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
