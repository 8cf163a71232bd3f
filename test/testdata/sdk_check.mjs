// The official OpenAI Node SDK against ILB's stack, as its users call it:
// node sdk_check.mjs BASE_URL (http://host:port/v1). Prints one line per
// failed check and exits 1 on any; "ok" otherwise. No retries: every
// answer counts.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0 });
const messages = [{ role: "user", content: "hi" }];
let failed = 0;
const fail = (what) => { failed++; console.log("FAIL " + what); };

const c = await client.chat.completions.create({ model: "llama3-8b", messages, max_tokens: 8 });
if (!c.choices?.[0]?.message?.content) fail("chat: " + JSON.stringify(c));

let text = "", chunks = 0;
const s = await client.chat.completions.create({ model: "qwen-7b", messages, max_tokens: 8, stream: true });
for await (const ch of s) { chunks++; text += ch.choices?.[0]?.delta?.content ?? ""; }
if (chunks < 2 || !text) fail(`stream: ${chunks} chunks, ${JSON.stringify(text)}`);

const ids = [];
for await (const m of client.models.list()) ids.push(m.id);
if (!ids.includes("llama3-8b") || !ids.includes("qwen2.5-7b-instruct")) fail("model list: " + ids.join(", "));
const m = await client.models.retrieve("meta-llama/Llama-3.1-8B-Instruct");
if (m.id !== "meta-llama/Llama-3.1-8B-Instruct") fail("model: " + JSON.stringify(m));

for (const [name, model, content, status, code, param] of [
  ["unknown model", "gpt-4o", "hi", 404, "model_not_found", "model"],
  ["a prompt that cannot fit", "llama3-8b", "x".repeat(1100000), 400, "context_length_exceeded", "messages"],
]) {
  try {
    await client.chat.completions.create({ model, messages: [{ role: "user", content }], max_tokens: 8 });
    fail(name + ": answered");
  } catch (e) {
    if (!(e instanceof OpenAI.APIError) || e.status !== status || e.code !== code || e.param !== param || !e.message)
      fail(`${name}: ${e} (status ${e.status}, code ${e.code}, param ${e.param}); want ${status} ${code} about ${param}`);
  }
}

for (let i = 0; i < 200; i++) {
  const r = await client.chat.completions.create({ model: "llama3-8b", messages, max_tokens: 1 });
  if (!r.choices?.length) { fail(`request ${i} in a row: ` + JSON.stringify(r)); break; }
}

const all = await Promise.allSettled(Array.from({ length: 50 }, () =>
  client.chat.completions.create({ model: "qwen-7b", messages, max_tokens: 4 })));
for (const r of all) if (r.status !== "fulfilled") fail("at once: " + r.reason);

console.log(failed ? `${failed} checks failed` : "ok");
process.exitCode = failed ? 1 : 0;
