// tests/compute/serve/images_test.mjs: image_url parts in `sluice serve` on
// K3-tiny with the official openai client. A data: URL image expands to its
// positions (prompt_tokens counted by hand from the media block), greedy
// output equals `sluice run --image` on the same ids, a later turn reuses the
// prompt that holds the same image, and prefix reuse never takes another
// image of the same size for it. http(s) URLs, paths and bytes that are not an
// image are 400s naming the param; an image larger than --max-body is a 413;
// a model without a vision tower refuses the part with a 400. serve's budget
// holds the tower from the start, and the media pad is never sampled. Exits
// 77 (skipped) without the client.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { SLUICE, load_openai, make_model, run, scratch, start, stop } from "./harness.mjs";
import { png } from "./png.mjs";

const OpenAI = await load_openai();

const data_url = (bytes) => "data:image/png;base64," + bytes.toString("base64");
// Two 90×60 pictures (a 6×4 patch grid: 6 positions each) that differ in content only.
const picture_a = png(90, 60, (x, y) => [(x * 3) % 256, (y * 5) % 256, (x * y) % 256]);
const picture_b = png(90, 60, (x, y) => [(255 - x * 2) % 256, (x + y) % 256, (y * 7) % 256]);
const POSITIONS = 6;
const TEXT = "What is in this picture?";

const image_part = (bytes) => ({ type: "image_url", image_url: { url: data_url(bytes) } });
const asking = (bytes) => [{ role: "user", content: [image_part(bytes), { type: "text", text: TEXT }] }];

describe("sluice serve with images", () => {
  let server = null, plain = null, client = null, model = "", special = {};

  before(async () => {
    model = make_model("kimi_k3", "k3.sluice");
    const tokenizer = JSON.parse(fs.readFileSync(path.join(model + ".checkpoint", "tokenizer.json"), "utf8"));
    special = Object.fromEntries(tokenizer.added_tokens.map((t) => [t.content, t.id]));
    server = await start(model, ["--max-body", "64K"]);
    client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "none", maxRetries: 0 });
  });

  after(async () => {
    if (server) assert.equal(await stop(server), 0, "sluice serve exits 0 on SIGTERM: " + server.log());
    if (plain) assert.equal(await stop(plain), 0, "sluice serve exits 0 on SIGTERM: " + plain.log());
  });

  const encode = (text) => JSON.parse(run([SLUICE, "tokenize", model, text, "--json"])).ids;

  it("expands an image to its positions and generates as `sluice run --image` does", async () => {
    const messages_path = path.join(scratch, "text-only.json");
    fs.writeFileSync(messages_path, JSON.stringify([{ role: "user", content: TEXT }]));
    const text_only = JSON.parse(run([SLUICE, "template", model, "--messages", messages_path, "--ids", "--json",
                                      "--add-generation-prompt", "--disable-thinking"])).ids;
    // The image part comes before the text: its media block opens the user message's body.
    const block = [special["<|media_begin|>"], ...encode("image 90x60"), special["<|media_content|>"],
                   special["<|media_pad|>"], special["<|media_end|>"]];
    const body = text_only.indexOf(special["<|sep|>"]) + 1;
    const ids = [...text_only.slice(0, body), ...block, ...text_only.slice(body)];

    const file = path.join(scratch, "a.png");
    fs.writeFileSync(file, picture_a);
    const ours = JSON.parse(run([SLUICE, "run", model, "--prompt-ids", ids.join(","), "--image", file, "-n", "4",
                                 "--temp", "0", "--json", "--threads", "1"]));
    assert.equal(ours.prompt_tokens, ids.length - 1 + POSITIONS);
    const added = new Set(Object.values(special));
    assert.ok(ours.tokens.every((t) => !added.has(t)), `run's greedy tokens are plain text: ${ours.tokens}`);

    // Every added token banned, so the reply is plain text and its tokens are run's.
    const ban = Object.fromEntries([...added].map((id) => [String(id), -100]));
    const reply = await client.chat.completions.create({
      messages: asking(picture_a), temperature: 0, max_tokens: 4, logit_bias: ban,
      chat_template_kwargs: { enable_thinking: false } });
    assert.equal(reply.usage.prompt_tokens, ours.prompt_tokens);
    assert.equal(reply.choices[0].message.content, ours.text);
  });

  it("reuses a prompt holding the same image, never one holding another of the same size", async () => {
    const go = (messages) => client.chat.completions.create({ messages, temperature: 0, max_tokens: 2 });
    const later = (bytes) => [...asking(bytes), { role: "assistant", content: "A picture." },
                              { role: "user", content: "Say more." }];
    const first = await go(asking(picture_a));
    const next = await go(later(picture_a));
    assert.equal(next.usage.prompt_tokens_details.cached_tokens, first.usage.prompt_tokens,
                 "the next turn reuses the whole first prompt, its image included");
    const again = await go(asking(picture_a));  // leaves the first prompt's state as the slot's snapshot
    assert.equal(again.usage.prompt_tokens, first.usage.prompt_tokens);
    const other = await go(later(picture_b));
    assert.equal(other.usage.prompt_tokens, next.usage.prompt_tokens, "the same ids, another image");
    assert.equal(other.usage.prompt_tokens_details.cached_tokens, 0,
                 "a state holding picture A is not reused for picture B");
  });

  it("refuses URLs, paths and non-images with a 400 naming the param", async () => {
    const refuse = async (part, param, words) => {
      await assert.rejects(client.chat.completions.create({
        messages: [{ role: "user", content: [part, { type: "text", text: "hi" }] }], max_tokens: 1 }), (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, String(e));
        assert.equal(e.param, param);
        assert.match(e.message, words);
        return true;
      });
    };
    const url = "messages[0].content[0].image_url.url";
    await refuse({ type: "image_url", image_url: { url: "https://example.com/cat.png" } }, url, /offline/);
    await refuse({ type: "image_url", image_url: { url: "http://127.0.0.1/cat.png" } }, url, /offline/);
    await refuse({ type: "image_url", image_url: { url: "/etc/hostname" } }, url, /no file is read/);
    await refuse({ type: "image_url", image_url: { url: "file:///etc/hostname" } }, url, /no file is read/);
    await refuse({ type: "image_url", image_url: { url: "data:text/plain;base64,aGk=" } }, url,
                 /data:image\/TYPE;base64/);
    await refuse({ type: "image_url", image_url: { url: "data:image/png;base64,aGVsbG8gd29ybGQ=" } }, url,
                 /not an image/);
    await refuse({ type: "image_url", image_url: { url: "data:image/png;base64,@@@@" } }, url, /not base64/);
    await refuse({ type: "image_url", image_url: {} }, "messages[0].content[0].image_url", /expected/);
    // The server still answers afterwards.
    const ok = await client.chat.completions.create({ messages: asking(picture_a), max_tokens: 1 });
    assert.equal(ok.choices.length, 1);
  });

  it("counts images against the request-size limit (413)", async () => {
    let seed = 1;
    const noise = () => ((seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff) >>> 16) & 255;
    const big = png(160, 160, () => [noise(), noise(), noise()]);  // ~77 KB, over --max-body 64K
    const res = await fetch(server.url + "/v1/chat/completions", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ messages: asking(big), max_tokens: 1 }) });
    assert.equal(res.status, 413);
    assert.match((await res.json()).error.message, /65536/);
  });

  it("plans for the vision tower from the start: a budget without room for it is refused", async () => {
    const plan = JSON.parse(run([SLUICE, "plan", model, "--parallel", "1", "--threads", "1", "--json"]));
    assert.equal(plan.images, true, "plan --parallel counts the tower serve keeps");
    assert.ok(plan.vision_bytes > 0);
    const without = plan.floor_bytes - plan.vision_bytes;
    const refused = spawnSync(SLUICE, ["serve", model, "--port", "0", "--threads", "1", "--budget", String(without)],
                              { encoding: "utf8", timeout: 60000 });
    assert.equal(refused.status, 1, `serve refuses a budget with no room for the tower: ${refused.stderr}`);
    assert.match(refused.stderr, /floor/);
    assert.match(refused.stderr, /vision tower/);
    const fits = await start(model, ["--budget", String(plan.floor_bytes)]);
    assert.equal(await stop(fits), 0, "serve at the floor with the tower exits 0 on SIGTERM: " + fits.log());
  });

  it("never samples the media pad, whose embedding is an image's place", async () => {
    // Text skips special tokens, so a sampled pad would show as missing text:
    // pushed up or down by logit_bias, the pad leaves the reply unchanged.
    const pad = special["<|media_pad|>"];
    const reply = async (bias) => (await client.completions.create(
      { model: "k3.sluice", prompt: [5, 9, 12], max_tokens: 4, temperature: 0, logit_bias: { [pad]: bias } }));
    const pushed = await reply(100), pushed_away = await reply(-100);
    assert.notEqual(pushed_away.choices[0].text, "");
    assert.equal(pushed.choices[0].text, pushed_away.choices[0].text);
    assert.equal(pushed.usage.completion_tokens, 4);
  });

  it("a model without a vision tower refuses an image part with a 400", async () => {
    plain = await start(make_model("olmoe", "olmoe.sluice"), []);
    const other = new OpenAI({ baseURL: plain.url + "/v1", apiKey: "none", maxRetries: 0 });
    await assert.rejects(other.chat.completions.create({ messages: asking(picture_a), max_tokens: 1 }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.param, "messages[0].content[0]");
      return true;
    });
  });

  it("refuses a media pad in /v1/completions, which has no images to fill it", async () => {
    await assert.rejects(
      client.completions.create({ model: "k3.sluice", prompt: [5, special["<|media_pad|>"]], max_tokens: 1 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === "prompt[1]");
  });
});
