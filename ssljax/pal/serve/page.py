"""The annotation page: plain HTML and a little JavaScript, no build step.

Two images side by side, "same" / "different" / "skip" buttons, keyboard
keys S, D and space, a counter, and the next pair fetched without a page
reload. The bearer token comes from the URL fragment (``/#token=...``, not
sent to the server in the URL) or a form, and is kept in the browser's
localStorage.
"""

__all__ = ["PAGE"]

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>ssljax PAL: same or different?</title>
<style>
 body { font-family: sans-serif; margin: 1.5em; background: #fafafa; }
 h1 { font-size: 1.3em; }
 #pair { display: flex; gap: 2em; margin: 1em 0; }
 #pair img { width: 40vmin; height: 40vmin; image-rendering: pixelated;
             border: 1px solid #999; background: #fff; }
 button { font-size: 1.2em; padding: 0.5em 1.2em; margin-right: 0.6em; }
 #counter, #msg { margin-top: 1em; color: #333; }
 #login { display: none; }
 kbd { border: 1px solid #999; border-radius: 3px; padding: 0 0.3em; }
</style>
</head>
<body>
<h1>Do these two images show the same kind of thing?</h1>
<form id="login">Token: <input id="token" size="50" autocomplete="off">
 <button type="submit">Start</button></form>
<div id="main">
 <div id="pair"><img id="left" alt="left image"><img id="right" alt="right image"></div>
 <div>
  <button id="same">Same <kbd>S</kbd></button>
  <button id="different">Different <kbd>D</kbd></button>
  <button id="skip">Skip <kbd>space</kbd></button>
 </div>
 <div id="counter">answered: <span id="count">0</span> (all annotators: <span id="total">0</span>)</div>
 <div id="msg"></div>
</div>
<script>
"use strict";
let token = null, current = null, busy = false, count = 0;
const $ = (id) => document.getElementById(id);
const m = location.hash.match(/token=([^&]+)/);
if (m) { localStorage.setItem("pal_token", decodeURIComponent(m[1]));
         history.replaceState(null, "", location.pathname); }
token = localStorage.getItem("pal_token");

function say(text) { $("msg").textContent = text; }
function headers() { return {"Authorization": "Bearer " + token,
                             "Content-Type": "application/json"}; }
function showLogin() { $("login").style.display = "block"; $("main").style.display = "none"; }

async function next() {
  const r = await fetch("/api/query", {headers: headers()});
  if (r.status === 401) { say("unknown token"); showLogin(); return; }
  if (r.status === 204) { current = null; say("No pair left: thank you!"); return; }
  if (!r.ok) { say("error " + r.status); return; }
  current = await r.json();
  $("left").src = current.images[0];
  $("right").src = current.images[1];
  say("");
}

async function send(answer) {
  if (!current || busy) return;
  busy = true;
  try {
    const r = await fetch("/api/answer", {method: "POST", headers: headers(),
      body: JSON.stringify({query_id: current.query_id, answer: answer})});
    if (!r.ok) { say("error " + r.status + ", answer not saved"); return; }
    count += 1;
    $("count").textContent = count;
    const s = await fetch("/api/status", {headers: headers()});
    if (s.ok) { $("total").textContent = (await s.json()).answers; }
    await next();
  } finally { busy = false; }
}

for (const name of ["same", "different", "skip"]) {
  // blur: a focused button would also take the next space or enter key.
  $(name).onclick = (e) => { e.currentTarget.blur(); send(name); };
}
document.addEventListener("keydown", (e) => {
  if (document.activeElement === $("token")) return;
  const k = e.key.toLowerCase();
  if (k === "s") send("same");
  else if (k === "d") send("different");
  else if (k === " ") { e.preventDefault(); send("skip"); }
});
$("login").onsubmit = (e) => {
  e.preventDefault();
  token = $("token").value.trim();
  localStorage.setItem("pal_token", token);
  $("login").style.display = "none"; $("main").style.display = "block";
  next();
};
if (token) next(); else showLogin();
</script>
</body>
</html>
"""
