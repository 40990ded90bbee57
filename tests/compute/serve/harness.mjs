// tests/compute/serve/harness.mjs: what the node tests of `sluice serve`
// share: the official openai and Anthropic clients (exit 77 when one is not installed),
// tiny containers made and converted in a scratch directory, servers started
// on a free port and never left running when the test ends or is killed.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

export const ROOT = process.env.SLUICE_SOURCE_ROOT;
export const SLUICE = process.env.SLUICE_BIN;
export const PYTHON = process.env.PYTHON || "/usr/bin/python3";

const children = new Set();
export const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-serve-"));
function kill_all() {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
}
// A test runner's SIGTERM (a timeout) must not leave a server running.
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => {
    kill_all();
    process.exit(1);
  });
}
process.on("exit", () => {
  kill_all();
  fs.rmSync(scratch, { recursive: true, force: true });
});

// An npm package's default export from tests/npm, or exit 77 (skipped)
// without it.
async function load_client(name) {
  try {
    const require = createRequire(path.join(ROOT, "tests", "npm", "package.json"));
    return (await import(require.resolve(name))).default;
  } catch (e) {
    console.log(`SKIP: the ${name} npm package is not installed under tests/npm (run scripts/setup): ` + e.message);
    process.exit(77);
  }
}

export const load_openai = () => load_client("openai");
export const load_anthropic = () => load_client("@anthropic-ai/sdk");

export function run(argv, options = {}) {
  const done = spawnSync(argv[0], argv.slice(1), { encoding: "utf8", ...options });
  assert.equal(done.status, 0, `${argv.join(" ")} failed: ${done.stderr}`);
  return done.stdout;
}

// A tiny random checkpoint of `family` (make_tiny_checkpoint.py --set each of
// `sets`); `edit(dir)` may change its files before it is converted to `name`.
export function make_model(family, name, sets = [], edit = null) {
  const checkpoint = path.join(scratch, name + ".checkpoint");
  const model = path.join(scratch, name);
  const made = spawnSync(PYTHON, [path.join(ROOT, "scripts", "make_tiny_checkpoint.py"), family, checkpoint,
                                  ...sets.flatMap((s) => ["--set", s])], { encoding: "utf8" });
  if (made.status !== 0) {
    console.log("SKIP: make_tiny_checkpoint.py failed: " + made.stderr);
    process.exit(77);
  }
  if (edit) edit(checkpoint);
  run([SLUICE, "convert", checkpoint, model, "-q"]);
  return model;
}

// Starts `sluice serve` and resolves with its base URL once it prints the port.
export function start(model, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(SLUICE, ["serve", model, "--port", "0", "--threads", "1", ...args], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.add(child);
    let out = "", err = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) resolve({ child, url: m[1], log: () => err });
    });
    child.stderr.on("data", (d) => (err += d));
    child.on("exit", (code) => reject(new Error(`sluice serve exited (${code}): ${err}`)));
  });
}

export function stopped(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve(child.exitCode);
    child.once("exit", (code) => resolve(code));
  });
}

// SIGTERM, and the exit status it ended with (0 when it stopped cleanly).
export async function stop(server) {
  server.child.kill("SIGTERM");
  return stopped(server.child);
}
