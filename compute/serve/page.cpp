// compute/serve/page.cpp: the page's text. Everything it shows comes from the
// server's own endpoints; it loads nothing from elsewhere, and it puts model
// output into the DOM as text, never as HTML.
#include "compute/serve/page.h"

namespace sluice::serve {

std::string_view page_html() {
  static constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>sluice</title>
<style>
body{margin:0;font:14px system-ui,sans-serif;display:flex;height:100vh;background:#f6f6f4;color:#222}
main{flex:2;display:flex;flex-direction:column;padding:12px;min-width:0}
aside{flex:1;padding:12px;border-left:1px solid #ddd;overflow:auto;min-width:260px}
#log{flex:1;overflow:auto;background:#fff;border:1px solid #ddd;padding:8px}
.msg{white-space:pre-wrap;margin:6px 0;padding:6px 8px;border-radius:6px}
.user{background:#e8f0fe}.assistant{background:#f1f1ef}.error{background:#fde8e8}
form{display:flex;gap:6px;margin-top:8px}textarea{flex:1;height:52px}
canvas{width:100%;border:1px solid #ddd;background:#fff}
.num{font-size:20px;font-weight:600}.row{display:flex;gap:16px;margin-bottom:8px}
small{color:#666}
</style></head><body>
<main>
  <div><b>sluice</b> <small id="model"></small>
    <label style="float:right"><small>API key</small> <input id="key" type="password" size="12"></label></div>
  <div id="log"></div>
  <form id="form"><textarea id="input" placeholder="Message (Enter sends, Shift+Enter breaks the line)"></textarea>
    <div><button id="send">Send</button><br><button id="stop" type="button" disabled>Stop</button>
    <br><button id="reset" type="button">Reset</button></div></form>
</main>
<aside>
  <div class="row"><div><small>decode tok/s</small><div class="num" id="rate">-</div></div>
    <div><small>expert hit rate</small><div class="num" id="hits">-</div></div>
    <div><small>queue</small><div class="num" id="queue">-</div></div></div>
  <div class="row"><div><small>generated</small><div id="generated">-</div></div>
    <div><small>prompt (cached)</small><div id="prompt">-</div></div>
    <div><small>read</small><div id="read">-</div></div>
    <div><small>lookahead P@1</small><div id="lookahead">-</div></div></div>
  <small>hit rate over time (per second)</small><canvas id="trend" width="400" height="100"></canvas>
  <small>expert heat per MoE layer (routings since the last second)</small><canvas id="heat" width="400" height="200"></canvas>
</aside>
<script>
"use strict";
const $ = id => document.getElementById(id);
const history = [];
let controller = null;
$("key").value = localStorage.getItem("sluice-key") || "";
$("key").onchange = () => localStorage.setItem("sluice-key", $("key").value);
function headers() {
  const h = {"Content-Type": "application/json"};
  if ($("key").value) h.Authorization = "Bearer " + $("key").value;
  return h;
}
function bubble(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("log").appendChild(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}
async function send(text) {
  history.push({role: "user", content: text});
  bubble("user", text);
  const out = bubble("assistant", "");
  out.dataset.done = "0";
  controller = new AbortController();
  $("stop").disabled = false; $("send").disabled = true;
  let reply = "";
  try {
    const res = await fetch("/v1/chat/completions", {method: "POST", headers: headers(), signal: controller.signal,
      body: JSON.stringify({messages: history, stream: true, stream_options: {include_usage: true}})});
    if (!res.ok) throw new Error((await res.json()).error.message);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        const delta = chunk.choices.length ? chunk.choices[0].delta : null;
        if (delta && delta.content) { reply += delta.content; out.textContent = reply; }
      }
    }
    history.push({role: "assistant", content: reply});
  } catch (e) {
    if (e.name !== "AbortError") { out.className = "msg error"; out.textContent = reply + "\n[" + e.message + "]"; }
    history.pop();
  } finally {
    out.dataset.done = "1";
    controller = null; $("stop").disabled = true; $("send").disabled = false;
  }
}
$("form").onsubmit = e => { e.preventDefault(); const t = $("input").value.trim(); if (t && !controller) { $("input").value = ""; send(t); } };
$("input").onkeydown = e => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); } };
$("stop").onclick = () => controller && controller.abort();
$("reset").onclick = () => { history.length = 0; $("log").textContent = ""; };

const trend = [];
let previous = null;
function drawTrend() {
  const c = $("trend"), g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  g.strokeStyle = "#2a6"; g.beginPath();
  trend.forEach((v, i) => { const x = i * c.width / 119, y = c.height - v * c.height; i ? g.lineTo(x, y) : g.moveTo(x, y); });
  g.stroke();
}
function drawHeat(now, before) {
  const c = $("heat"), g = c.getContext("2d");
  const layers = now.length, experts = layers ? now[0].length : 0;
  g.clearRect(0, 0, c.width, c.height);
  if (!layers || !experts) return;
  const w = c.width / experts, h = c.height / layers;
  for (let l = 0; l < layers; l++) {
    const row = now[l].map((v, e) => v - (before ? before[l][e] : 0));
    const top = Math.max(1, ...row);
    row.forEach((v, e) => { g.fillStyle = "rgba(200,60,20," + (v / top).toFixed(3) + ")"; g.fillRect(e * w, l * h, Math.ceil(w), Math.ceil(h)); });
  }
}
async function poll() {
  try {
    const res = await fetch("/sluice/stats", {headers: headers()});
    if (res.ok) {
      const s = await res.json();
      $("model").textContent = s.model + " · context " + s.context;
      $("rate").textContent = s.decode_tokens_per_second.toFixed(1);
      $("queue").textContent = s.queue_depth + s.processing;
      $("generated").textContent = s.generated_tokens;
      $("prompt").textContent = s.prompt_tokens + " (" + s.cached_tokens + ")";
      $("read").textContent = (s.experts.bytes_read / 1e6).toFixed(1) + " MB";
      $("lookahead").textContent = s.lookahead ? (100 * s.lookahead.precision_at_1).toFixed(1) + "%" : "-";
      const total = s.experts.requests ? s.experts.hits / s.experts.requests : 0;
      $("hits").textContent = (100 * total).toFixed(1) + "%";
      if (previous) {
        const asked = s.experts.requests - previous.experts.requests;
        trend.push(asked ? (s.experts.hits - previous.experts.hits) / asked : (trend.length ? trend[trend.length - 1] : 0));
        if (trend.length > 120) trend.shift();
        drawTrend();
      }
      drawHeat(s.heat, previous && previous.heat);
      previous = s;
    }
  } catch (e) {}
  setTimeout(poll, 1000);
}
poll();
</script></body></html>
)HTML";
  return kPage;
}

}  // namespace sluice::serve
