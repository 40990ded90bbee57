// tests/compute/serve/page_test.mjs: the page at / in headless Chromium,
// driven over the DevTools protocol on a pipe (Node's built-ins only): it
// loads and shows the live view and a curl example of each API, a message
// typed and sent with Enter gets a streamed reply, and Stop ends a reply that
// would run to the context's end (the engine is then free and counts it
// cancelled). Exits 77 (skipped) only when Chromium cannot start; no Chromium
// process outlives the test.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { make_model, scratch, start, stop } from "./harness.mjs";

const CONTEXT = 16384;  // a reply with its end tokens banned outlasts the test
const WAIT_MS = 60000;   // the longest any condition below may take on a loaded machine

function find_chromium() {
  for (const name of ["chromium", "chromium-browser", "google-chrome"]) {
    const found = spawnSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" });
    if (found.status === 0) return found.stdout.trim();
  }
  return null;
}

// Every process the browser starts inherits this variable, even the crash
// handlers that leave its process group: how the test finds them all.
const MARK = "SLUICE_PAGE_TEST_BROWSER";

// The pids of live (not zombie) processes whose environment carries MARK=scratch.
function marked_processes() {
  const found = [];
  for (const pid of fs.readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
      if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) continue;
      if (fs.readFileSync(`/proc/${pid}/environ`, "latin1").split("\0").includes(`${MARK}=${scratch}`))
        found.push(Number(pid));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return found;
}

// A browser in its own process group, spoken to over fds 3 (in) and 4 (out):
// NUL-terminated JSON messages of the DevTools protocol.
class Browser {
  constructor(executable) {
    this.child = spawn(executable, [
      "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
      "--disable-crash-reporter", "--disable-dev-shm-usage", "--remote-debugging-pipe",
      `--user-data-dir=${path.join(scratch, "chromium-profile")}`, "about:blank",
    ], { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"], detached: true,
         env: { ...process.env, HOME: scratch, [MARK]: scratch } });
    this.stderr = "";
    this.child.stdio[2].on("data", (d) => (this.stderr = (this.stderr + d).slice(-4000)));
    this.next_id = 1;
    this.waiting = new Map();
    this.listeners = [];
    let buffer = "";
    this.child.stdio[4].on("data", (data) => {
      buffer += data.toString("utf8");
      let end;
      while ((end = buffer.indexOf("\0")) >= 0) {
        const message = JSON.parse(buffer.slice(0, end));
        buffer = buffer.slice(end + 1);
        if (message.id && this.waiting.has(message.id)) {
          const { resolve, reject } = this.waiting.get(message.id);
          this.waiting.delete(message.id);
          if (message.error) reject(new Error(`${message.error.message} (${JSON.stringify(message.error.data)})`));
          else resolve(message.result);
        } else if (message.method) {
          for (const listener of this.listeners) listener(message);
        }
      }
    });
    this.exited = new Promise((resolve) => this.child.once("exit", resolve));
    this.exited.then(() => {
      for (const { reject } of this.waiting.values()) reject(new Error("chromium exited: " + this.stderr));
      this.waiting.clear();
    });
  }

  send(method, params = {}, sessionId = undefined) {
    const id = this.next_id++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.child.stdio[3].write(JSON.stringify({ id, method, params, sessionId }) + "\0");
    });
  }

  // Closes the browser; resolves with the pids of its processes still alive
  // 10 s later (which it then kills): none, when it cleans up after itself.
  async close() {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const closed = this.send("Browser.close").catch(() => {});
      const timer = setTimeout(() => process.kill(-this.child.pid, "SIGKILL"), 10000);
      await Promise.race([closed.then(() => this.exited), this.exited]);
      clearTimeout(timer);
    }
    const deadline = Date.now() + 10000;
    let left = marked_processes();
    while (left.length && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      left = marked_processes();
    }
    for (const pid of left) process.kill(pid, "SIGKILL");
    return left;
  }
}

// A page of the browser: evaluate expressions in it, wait for conditions.
class Page {
  constructor(browser, sessionId) {
    this.browser = browser;
    this.sessionId = sessionId;
  }
  send(method, params = {}) {
    return this.browser.send(method, params, this.sessionId);
  }
  async eval(expression) {
    const r = await this.send("Runtime.evaluate", { expression, returnByValue: true, awaitPromise: true });
    if (r.exceptionDetails) throw new Error(`${expression}: ${JSON.stringify(r.exceptionDetails)}`);
    return r.result.value;
  }
  // Re-checks `expression` in the page every 20 ms until it holds (one round
  // trip); fails after WAIT_MS.
  async until(expression, what) {
    const ok = await this.eval(`new Promise((resolve) => {
      const deadline = performance.now() + ${WAIT_MS};
      const check = () => { if (${expression}) resolve(true); else if (performance.now() > deadline) resolve(false);
                            else setTimeout(check, 20); };
      check(); })`);
    assert.ok(ok, `timed out waiting for ${what}`);
  }
  async click(selector) {
    const box = await this.eval(`(() => { const r = document.querySelector(${JSON.stringify(selector)}).getBoundingClientRect();
                                          return { x: r.x + r.width / 2, y: r.y + r.height / 2 }; })()`);
    for (const type of ["mousePressed", "mouseReleased"])
      await this.send("Input.dispatchMouseEvent", { type, x: box.x, y: box.y, button: "left", clickCount: 1 });
  }
  async type_and_enter(text) {
    await this.eval(`document.getElementById("input").focus()`);
    await this.send("Input.insertText", { text });
    await this.send("Input.dispatchKeyEvent",
                    { type: "keyDown", key: "Enter", code: "Enter", windowsVirtualKeyCode: 13 });
    await this.send("Input.dispatchKeyEvent",
                    { type: "keyUp", key: "Enter", code: "Enter", windowsVirtualKeyCode: 13 });
  }
}

let server = null, browser = null, page = null, endless = null;
// Killed or failed: the browser's group goes too (its crash handlers exit
// once it is gone).
process.on("exit", () => {
  try {
    if (browser) process.kill(-browser.child.pid, "SIGKILL");
  } catch {
    // already gone
  }
});

async function metric(name) {
  const text = await (await fetch(server.url + "/metrics")).text();
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  return line ? Number(line.split(" ")[1]) : 0;
}

describe("the page at / in headless Chromium", () => {
  before(async () => {
    const executable = find_chromium();
    if (!executable) {
      console.log("SKIP: no chromium on PATH (scripts/setup installs Debian's chromium)");
      process.exit(77);
    }
    browser = new Browser(executable);
    let timer;
    const version = await Promise.race([
      browser.send("Browser.getVersion").catch(() => null),
      browser.exited.then(() => null),
      new Promise((resolve) => (timer = setTimeout(() => resolve(null), WAIT_MS))),
    ]);
    clearTimeout(timer);
    if (!version) {
      console.log("SKIP: chromium cannot run here: " + browser.stderr.split("\n").slice(-5).join("\n"));
      await browser.close();
      process.exit(77);
    }
    const model = make_model("olmoe", "page.sluice", [`max_position_embeddings=${CONTEXT}`]);
    const config = JSON.parse(fs.readFileSync(path.join(model, "tokenizer_config.json"), "utf8"));
    endless = Object.fromEntries(Object.keys(config.added_tokens_decoder).map((id) => [id, -100]));
    server = await start(model, ["--ctx", String(CONTEXT)]);
    const { targetId } = await browser.send("Target.createTarget", { url: "about:blank" });
    const { sessionId } = await browser.send("Target.attachToTarget", { targetId, flatten: true });
    page = new Page(browser, sessionId);
    await page.send("Page.enable");
    await page.send("Runtime.enable");
    await page.send("Page.navigate", { url: server.url + "/" });
    await page.until(`document.readyState === "complete" && document.getElementById("form")`, "the page to load");
    // The test sets fields the page does not (a length cap, banned end
    // tokens) on the page's own requests, so each reply ends when it should.
    await page.eval(`(() => { const original = window.fetch; window.extra_fields = {};
      window.fetch = (url, init) => {
        if (url === "/v1/chat/completions")
          init = { ...init, body: JSON.stringify({ ...JSON.parse(init.body), ...window.extra_fields }) };
        return original(url, init); }; })()`);
  });

  after(async () => {
    if (browser) assert.deepEqual(await browser.close(), [], "no chromium process is left behind");
    if (server) assert.equal(await stop(server), 0, server.log());
  });

  it("shows the live view from /sluice/stats", async () => {
    await page.until(`document.getElementById("model").textContent.startsWith("page.sluice")`, "the model's name");
    assert.match(await page.eval(`document.getElementById("model").textContent`), /context 16384/);
    await page.until(`document.getElementById("hits").textContent.endsWith("%")`, "the hit rate");
  });

  it("lists both APIs with a curl example of each, for this server and model", async () => {
    const openai = await page.eval(`document.getElementById("curl-openai").textContent`);
    assert.ok(openai.startsWith(`curl ${server.url}/v1/chat/completions`), openai);
    const anthropic = await page.eval(`document.getElementById("curl-anthropic").textContent`);
    assert.ok(anthropic.startsWith(`curl ${server.url}/v1/messages`), anthropic);
    assert.match(anthropic, /"model": "page\.sluice"/);
    assert.match(anthropic, /anthropic-version: 2023-06-01/);
  });

  it("streams the reply to a message typed and sent with Enter", async () => {
    await page.eval(`window.extra_fields = { max_tokens: 24, temperature: 0 }`);
    await page.type_and_enter("Tell me about the river.");
    await page.until(`document.querySelectorAll(".msg").length === 2`, "the two bubbles");
    assert.equal(await page.eval(`document.querySelector(".msg.user").textContent`), "Tell me about the river.");
    assert.equal(await page.eval(`document.getElementById("input").value`), "", "the box is cleared");
    await page.until(`document.querySelector(".msg.assistant").dataset.done === "1"`, "the reply to end");
    const shown = await page.eval(`document.querySelector(".msg.assistant").textContent`);
    // The same request from here gives the text the page showed.
    const res = await fetch(server.url + "/v1/chat/completions", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content: "Tell me about the river." }], max_tokens: 24, temperature: 0 }),
    });
    const expected = (await res.json()).choices[0].message.content;
    assert.ok(expected.length > 0);
    assert.equal(shown, expected);
    assert.equal(await page.eval(`history.length`), 2, "the page keeps the turn");
    assert.equal(await page.eval(`document.getElementById("send").disabled`), false);
  });

  it("stops a streaming reply with Stop, and the engine is free again", async () => {
    const cancelled = await metric('sluice_generations_total{finish_reason="cancelled"}');
    await page.eval(`window.extra_fields = { temperature: 0, logit_bias: ${JSON.stringify(endless)} }`);
    await page.type_and_enter("And then?");
    await page.until(`document.querySelectorAll(".msg.assistant").length === 2 &&
                      document.querySelectorAll(".msg.assistant")[1].textContent.length > 0`, "streamed text");
    assert.equal(await page.eval(`document.getElementById("stop").disabled`), false);
    await page.click("#stop");
    await page.until(`document.querySelectorAll(".msg.assistant")[1].dataset.done === "1"`, "the reply to stop");
    assert.equal(await page.eval(`document.querySelectorAll(".msg.assistant")[1].className`), "msg assistant",
                 "a stopped reply is not shown as an error");
    assert.equal(await page.eval(`document.getElementById("stop").disabled`), true);
    assert.equal(await page.eval(`history.length`), 2, "a stopped turn is not kept");
    // With one sequence slot, this answers only once the stopped generation has ended.
    const next = await fetch(server.url + "/v1/chat/completions", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content: "Hi" }], max_tokens: 2, temperature: 0 }),
    });
    assert.equal((await next.json()).usage.completion_tokens, 2);
    assert.equal(await metric('sluice_generations_total{finish_reason="cancelled"}'), cancelled + 1);
    if (process.env.SLUICE_PAGE_SCREENSHOT) {
      const shot = await page.send("Page.captureScreenshot", { format: "png" });
      fs.writeFileSync(process.env.SLUICE_PAGE_SCREENSHOT, Buffer.from(shot.data, "base64"));
    }
  });
});
