// reasoning_effort through the official `openai` client against a server whose chat template is
// harmony (gpt-oss's; `npullm serve --chat-template harmony`): each level is accepted and reaches
// the template, which writes it into the system message ("Reasoning: low"), so the prompt differs
// between levels, and a request without it renders as the template's default, medium. A value that
// is not a level is refused by name. (On a template without the variable the field is refused:
// structured.mjs.)
//
// env: NPULLM_URL (a server started with --chat-template harmony).
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { baseUrl, deadline, main } from './lib.mjs';

deadline(60_000);
const client = new OpenAI({ baseURL: `${baseUrl()}/v1`, apiKey: 'none', maxRetries: 0, timeout: 30_000 });

async function promptTokens(extra) {
  const r = await client.chat.completions.create({ model: '', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4, temperature: 0, ...extra });
  assert.equal(r.object, 'chat.completion');
  return r.usage.prompt_tokens;
}

main(async () => {
  const low = await promptTokens({ reasoning_effort: 'low' });
  const medium = await promptTokens({ reasoning_effort: 'medium' });
  const high = await promptTokens({ reasoning_effort: 'high' });
  const none = await promptTokens({});
  assert.equal(none, medium, 'without reasoning_effort the template writes its default, medium');
  assert.ok(new Set([low, medium, high]).size > 1, `the level reaches the prompt: ${low} / ${medium} / ${high} tokens`);
  await assert.rejects(promptTokens({ reasoning_effort: 'extreme' }), (e) => e.status === 400 && e.error?.param === 'reasoning_effort');
  console.log(`reasoning: prompt tokens low ${low}, medium ${medium}, high ${high}, without ${none}`);
});
