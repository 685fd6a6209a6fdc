// The browser page at `GET /`, driven in Debian's chromium through playwright-core: a streamed
// reply with its usage line, the runtime panel (K/V rows, step blob), the Stop button and
// New chat. Fails on console errors and on any request that leaves 127.0.0.1.
//
// env: NPULLM_URL, optional NPULLM_SCREENSHOT (default build/web-page.png), NPULLM_CHROMIUM
// (default /usr/bin/chromium), NPULLM_API_KEY.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { baseUrl, deadline, main, sleep } from './lib.mjs';

deadline(180_000);
const URL_ = baseUrl();
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const SHOT = path.resolve(ROOT, process.env.NPULLM_SCREENSHOT || 'build/web-page.png');
const CHROMIUM = process.env.NPULLM_CHROMIUM || '/usr/bin/chromium';
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const consoleErrors = [];
const foreign = new Set();
let context;
let profile;

// Everything the page asks for must come from the server under test (data: URLs are inline).
function isLocal(u) {
  if (/^(data|blob|about):/.test(u)) return true;
  try { return new URL(u).hostname === '127.0.0.1'; } catch { return false; }
}

// What the test reads from the page, in one round trip.
const snapshot = (page) => page.evaluate(() => {
  const replies = document.querySelectorAll('[data-testid="reply"]');
  const last = replies[replies.length - 1];
  const usage = last ? last.parentElement.querySelector('[data-testid="usage"]') : null;
  const kv = [...document.querySelectorAll('[data-testid$="-kv"]')].map((e) => Number(e.textContent));
  const states = [...document.querySelectorAll('[data-testid$="-state"]')].map((e) => e.textContent);
  return {
    replies: replies.length,
    reply: last ? last.textContent : '',
    usage: usage ? usage.textContent : null,
    error: last ? last.parentElement.querySelector('[data-testid="error"]')?.textContent ?? null : null,
    stopped: !!(last && last.parentElement.querySelector('[data-testid="stopped"]')),
    kv, states,
    blob: document.querySelector('[data-testid="step-blob"]').textContent,
    sendDisabled: document.querySelector('[data-testid="send"]').disabled,
    stopDisabled: document.querySelector('[data-testid="stop"]').disabled,
  };
});

// Records every length the newest reply element takes, from inside the page, so a fast stream
// cannot slip between two polls. With stopOnFirst it presses Stop the moment text appears.
const watchReply = (page, stopOnFirst) => page.evaluate((stopOnFirst) => {
  window.__lengths = [];
  const obs = new MutationObserver(() => {
    const replies = document.querySelectorAll('[data-testid="reply"]');
    const last = replies[replies.length - 1];
    if (!last) return;
    const n = last.textContent.length;
    if (window.__lengths[window.__lengths.length - 1] !== n) window.__lengths.push(n);
    if (stopOnFirst && n > 0) { obs.disconnect(); document.querySelector('[data-testid="stop"]').click(); }
  });
  obs.observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
}, stopOnFirst);

async function waitFor(page, what, pred, ms, onSnap) {
  const t0 = Date.now();
  for (;;) {
    const s = await snapshot(page);
    if (onSnap) onSnap(s);
    if (s.error) throw new Error(`the page shows an error while waiting for ${what}: ${s.error}`);
    if (pred(s)) return s;
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}; last state ${JSON.stringify(s)}`);
    await sleep(25);
  }
}

async function sendMessage(page, text) {
  await page.getByTestId('input').fill(text);
  await page.getByTestId('send').click();
}

main(async () => {
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} not found (apt-get install chromium)`);
  // A fresh profile per run; Playwright takes it as userDataDir rather than a --user-data-dir arg.
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'npullm-chromium-'));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM, headless: true, args: ARGS, viewport: { width: 1280, height: 860 },
  });
  await context.route((u) => !isLocal(u.href), (route) => { foreign.add(route.request().url()); route.abort(); });
  if (process.env.NPULLM_API_KEY)
    await context.addInitScript((key) => localStorage.setItem('npullm.apiKey', key), process.env.NPULLM_API_KEY);
  const page = context.pages()[0] ?? await context.newPage();
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(`${m.text()} @ ${m.location().url}`); });
  page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e.message}`));
  page.on('request', (r) => { if (!isLocal(r.url())) foreign.add(r.url()); });

  const res = await page.goto(`${URL_}/`);
  assert.equal(res.status(), 200, 'GET / status');
  assert.match(res.headers()['content-type'] || '', /^text\/html/, 'GET / content-type');
  // The runtime panel fills from /slots.
  const first = await waitFor(page, 'the slot rows', (s) => s.kv.length > 0, 10_000);
  assert.ok(first.kv.every((n) => Number.isInteger(n) && n >= 0), `slot K/V texts are integers: ${first.kv}`);
  const model = await page.getByTestId('model-name').textContent();
  assert.ok(model && model !== '…', 'the model name is shown');

  // --- a streamed reply ---
  await page.getByTestId('max_tokens').fill('64');
  await page.getByTestId('seed').fill('7');
  await watchReply(page, false);
  let maxKv = 0, blob = null;
  const track = (s) => {
    maxKv = Math.max(maxKv, ...s.kv);
    if (/^\d+×\d+$/.test(s.blob)) blob = s.blob;
  };
  await sendMessage(page, 'Tell me a story about a brave little mouse.');
  const done = await waitFor(page, 'the usage line', (s) => s.usage !== null && !s.sendDisabled, 60_000, track);
  assert.ok(done.reply.length > 0, 'the reply is not empty');
  const m = done.usage.match(/prompt (\d+) · cached (\d+) · completion (\d+) · ([\d.]+|—) tok\/s/);
  assert.ok(m, `usage line format: ${done.usage}`);
  const completion = Number(m[3]);
  const lengths = (await page.evaluate(() => window.__lengths)).filter((n) => n > 0);
  if (completion > 1) assert.ok(new Set(lengths).size >= 2, `the reply grew while streaming; lengths seen: ${lengths}`);
  else console.warn(`WARNING: the reply was ${completion} token(s); growth not checked`);
  // After the reply the slot keeps its rows (the server caches the prefix); give the poll a moment.
  const after = await waitFor(page, 'K/V rows > 0', (s) => { track(s); return maxKv > 0 && blob !== null; }, 5_000, track);
  console.log(`reply: ${done.reply.length} chars, ${lengths.length} lengths; usage "${done.usage}"; max K/V rows ${maxKv}; step blob ${blob}; slot states ${after.states.join(',')}`);

  // --- a second turn (the history is sent again; the server should reuse cached rows) ---
  await watchReply(page, false);
  await sendMessage(page, 'And then what happened?');
  const turn2 = await waitFor(page, 'the second usage line', (s) => s.replies === 2 && s.usage !== null && !s.sendDisabled, 60_000, track);
  console.log(`turn 2 usage: ${turn2.usage}`);

  // --- Stop: a long reply, stopped at its first text ---
  await page.getByTestId('max_tokens').fill('400');
  await page.getByTestId('seed').fill('');
  await watchReply(page, true);
  await sendMessage(page, 'Tell me a very long story about a dragon and a princess.');
  const stopped = await waitFor(page, 'the stopped note', (s) => s.replies === 3 && s.stopped && !s.sendDisabled, 30_000);
  assert.ok(stopped.stopDisabled, 'Stop is disabled again after stopping');
  assert.equal(stopped.usage, null, 'a stopped reply has no usage line');
  await sleep(1500);
  const later = await snapshot(page);
  assert.equal(later.reply, stopped.reply, 'the reply did not grow after Stop');
  // Closing the stream is the server's cue to free the slot.
  await waitFor(page, 'all slots idle after Stop', (s) => s.states.length > 0 && s.states.every((x) => x === 'idle'), 10_000);
  console.log(`stopped after ${stopped.reply.length} chars`);

  fs.mkdirSync(path.dirname(SHOT), { recursive: true });
  await page.screenshot({ path: SHOT, fullPage: true });
  console.log(`screenshot: ${SHOT}`);

  // --- narrow window: the layout still shows the composer ---
  await page.setViewportSize({ width: 420, height: 800 });
  assert.ok(await page.getByTestId('send').isVisible(), 'Send is visible in a narrow window');

  // --- New chat clears the conversation ---
  await page.getByTestId('new-chat').click();
  assert.equal((await snapshot(page)).replies, 0, 'New chat clears the messages');

  await sleep(600);   // one more /slots poll, so errors it might log are caught
  assert.deepEqual([...foreign], [], `the page requested non-127.0.0.1 URLs: ${[...foreign].join(', ')}`);
  assert.deepEqual(consoleErrors, [], `console errors:\n  ${consoleErrors.join('\n  ')}`);
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
});

// Do not leave a browser behind when the script fails.
process.on('exit', () => { if (profile) try { fs.rmSync(profile, { recursive: true, force: true }); } catch { /* ignore */ } });
