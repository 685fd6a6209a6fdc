// The browser page at `GET /`, driven in Debian's chromium through playwright-core: a streamed
// reply with its usage line, the runtime panel (K/V rows, step blob), the Stop button, a reload
// that keeps the conversation and the settings, Regenerate (a new streamed reply in place of the
// last), editing the last user message, New chat and the list of conversations (switch, delete),
// and a conversation the test stores in the browser whose reply is Markdown with a code block, a
// list, a table and HTML: rendered as such, with a copy button, the HTML shown as inert text.
// Fails on console errors and on any request that leaves 127.0.0.1.
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

deadline(process.env.NPULLM_SANITIZER ? 360_000 : 180_000);  // (a sanitizer build runs several times slower)
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

  // --- a reload keeps the conversation, and the sampling settings ---
  const replyTexts = () => page.evaluate(() => [...document.querySelectorAll('[data-testid="reply"]')].map((e) => e.textContent));
  const kept = await replyTexts();
  await page.reload();
  await waitFor(page, 'the conversation after a reload', (s) => s.replies === kept.length, 10_000);
  assert.deepEqual(await replyTexts(), kept, 'a reload shows the same replies');
  assert.ok((await snapshot(page)).stopped, 'the stopped note is kept too');
  assert.equal(await page.getByTestId('max_tokens').inputValue(), '400', 'the sampling settings are remembered');

  // --- Regenerate: the last reply is replaced by a new one, streamed ---
  await page.getByTestId('max_tokens').fill('48');
  await watchReply(page, false);
  await page.getByTestId('regenerate').click();
  const regen = await waitFor(page, 'the regenerated reply', (s) => s.replies === kept.length && s.usage !== null && !s.sendDisabled,
    60_000);
  const regenLengths = await page.evaluate(() => window.__lengths);
  assert.ok(regenLengths.includes(0), `the regenerated reply started empty; lengths seen: ${regenLengths}`);
  if (Number(regen.usage.match(/completion (\d+)/)[1]) > 1)
    assert.ok(new Set(regenLengths.filter((n) => n > 0)).size >= 2, `the new reply streamed; lengths seen: ${regenLengths}`);
  assert.ok(!regen.stopped, 'the stopped reply is gone');
  const conv = await page.evaluate(() => JSON.parse(localStorage.getItem('npullm.conversations'))
    .find((c) => c.id === localStorage.getItem('npullm.currentConversation')));
  assert.deepEqual(conv.messages.map((m) => m.role), ['user', 'assistant', 'user', 'assistant', 'user', 'assistant'],
    'the stored conversation has the regenerated reply in place of the old one');
  assert.equal(conv.messages[5].content.length > 0, true);
  console.log(`regenerated: ${regen.reply.length} chars; usage "${regen.usage}"`);

  // --- Edit the last user message: what followed it is asked again ---
  await page.getByTestId('edit').click();
  await page.getByTestId('edit-input').fill('Tell me a short story about a cat.');
  await watchReply(page, false);
  await page.getByTestId('edit-save').click();
  await waitFor(page, 'the reply to the edited message', (s) => s.replies === kept.length && s.usage !== null && !s.sendDisabled, 60_000);
  const users = await page.evaluate(() => [...document.querySelectorAll('[data-testid="user-message"]')].map((e) => e.textContent));
  assert.equal(users[users.length - 1], 'Tell me a short story about a cat.', 'the edited message replaced the last one');
  assert.equal(users.length, kept.length, 'no message was added by the edit');

  fs.mkdirSync(path.dirname(SHOT), { recursive: true });
  await page.screenshot({ path: SHOT, fullPage: true });
  console.log(`screenshot: ${SHOT}`);

  // --- narrow window: the layout still shows the composer ---
  await page.setViewportSize({ width: 420, height: 800 });
  assert.ok(await page.getByTestId('send').isVisible(), 'Send is visible in a narrow window');

  // --- New chat clears the conversation; the list switches back to it and deletes it ---
  await page.setViewportSize({ width: 1280, height: 860 });
  await page.getByTestId('new-chat').click();
  assert.equal((await snapshot(page)).replies, 0, 'New chat clears the messages');
  const listed = () => page.evaluate(() => [...document.querySelectorAll('[data-testid="conversation-open"]')].map((e) => e.textContent));
  const titles = await listed();
  assert.ok(titles.some((t) => t.startsWith('Tell me a story about a brave')), `the first conversation is listed: ${titles}`);
  await page.getByTestId('conversation-open').filter({ hasText: 'Tell me a story about a brave' }).click();
  await waitFor(page, 'the first conversation again', (s) => s.replies === kept.length, 5_000);
  await page.getByTestId('conversation').filter({ hasText: 'Tell me a story about a brave' }).getByTestId('conversation-delete').click();
  assert.ok(!(await listed()).some((t) => t.startsWith('Tell me a story about a brave')), 'the deleted conversation is gone');
  assert.equal((await snapshot(page)).replies, 0, 'deleting the open conversation leaves an empty one');
  const left = await page.evaluate(() => JSON.parse(localStorage.getItem('npullm.conversations')));
  assert.ok(!left.some((c) => (c.title || '').startsWith('Tell me a story about a brave')), 'deleted from storage too');

  // --- A stored conversation, placed in the browser's storage: its reply rendered as Markdown ---
  await page.evaluate(() => {
    const reply = 'Here is the code:\n\n```js\nconsole.log("hi <b>");\n```\n\n- first item\n- second *item*\n\n' +
      '<script>window.__pwned = 1</script> and <img src=x onerror="window.__pwned = 2">\n\n| a | b |\n|---|---|\n| `1` | 2 |';
    const all = JSON.parse(localStorage.getItem('npullm.conversations') || '[]');
    all.push({ id: 'stored-by-test', title: 'Stored', updated: Date.now(),
               messages: [{ role: 'user', content: 'Show me <i>code</i>' }, { role: 'assistant', content: reply }] });
    localStorage.setItem('npullm.conversations', JSON.stringify(all));
    localStorage.setItem('npullm.currentConversation', 'stored-by-test');
  });
  await page.reload();
  await waitFor(page, 'the stored conversation', (s) => s.replies === 1, 10_000);
  const md = await page.evaluate(() => {
    const r = document.querySelector('[data-testid="reply"]');
    return {
      code: r.querySelector('[data-testid="code-block"] pre code')?.textContent ?? null,
      copy: r.querySelectorAll('[data-testid="code-block"] [data-testid="copy-code"]').length,
      items: [...r.querySelectorAll('ul > li')].map((e) => e.textContent),
      em: r.querySelector('ul em')?.textContent ?? null,
      elements: r.querySelectorAll('script, img, b, i').length,
      text: r.textContent,
      user: document.querySelector('[data-testid="user-message"]').textContent,
      cells: [...r.querySelectorAll('table td')].map((e) => e.textContent),
      pwned: window.__pwned ?? null,
    };
  });
  assert.equal(md.code, 'console.log("hi <b>");', 'the code block holds the code as text');
  assert.equal(md.copy, 1, 'the code block has a copy button');
  assert.deepEqual(md.items, ['first item', 'second item'], 'the list renders as a list');
  assert.equal(md.em, 'item', 'inline emphasis');
  assert.deepEqual(md.cells, ['1', '2'], 'the table renders as a table');
  assert.equal(md.elements, 0, 'no element made from the reply\'s HTML');
  assert.ok(md.text.includes('<script>window.__pwned = 1</script>'), `the script shows as text: ${md.text}`);
  assert.equal(md.user, 'Show me <i>code</i>', 'a user message shows as text');
  await sleep(200);
  assert.equal(await page.evaluate(() => window.__pwned ?? null), null, 'nothing in the reply ran');
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: URL_ });
  await page.getByTestId('copy-code').click();
  await page.waitForFunction(() => document.querySelector('[data-testid="copy-code"]').textContent === 'Copied', null, { timeout: 5_000 });
  const clip = await page.evaluate(() => navigator.clipboard.readText().catch(() => null));
  if (clip !== null) assert.equal(clip, 'console.log("hi <b>");', 'Copy puts the code on the clipboard');
  console.log(`stored conversation: code block, ${md.items.length} list items, a table; clipboard ${clip === null ? 'not readable' : 'checked'}`);

  await sleep(600);   // one more /slots poll, so errors it might log are caught
  assert.deepEqual([...foreign], [], `the page requested non-127.0.0.1 URLs: ${[...foreign].join(', ')}`);
  assert.deepEqual(consoleErrors, [], `console errors:\n  ${consoleErrors.join('\n  ')}`);
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
});

// Do not leave a browser behind when the script fails.
process.on('exit', () => { if (profile) try { fs.rmSync(profile, { recursive: true, force: true }); } catch { /* ignore */ } });
