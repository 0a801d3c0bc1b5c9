// The runs pages: /ui/runs lists runs, /ui/runs/{id} shows one (steps, live events, cost
// and budget, what waits for a person) and decides there. Everything a run wrote is shown
// as text (textContent), never as markup. With page.js: the key lives in the form field.
"use strict";
// headers, say, cell and detail are page.js's.
const runId = decodeURIComponent(location.pathname.replace(/^\/ui\/runs\/?/, ""));
let lastEvent = 0;
let following = false;

function text(tag, content, className) {
  const node = document.createElement(tag);
  node.textContent = content;
  if (className) node.className = className;
  return node;
}

function shown(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

async function get(path) {
  let response;
  try {
    response = await fetch(path, { headers: headers() });
  } catch (e) {
    say("The API did not answer: " + e, "error");
    return null;
  }
  if (!response.ok) {
    say(response.status + ": " + await detail(response), "error");
    return null;
  }
  if (message.className === "error") say("");
  return response.json();
}

async function loadList() {
  document.getElementById("list").hidden = false;
  const found = await get("/v1/runs?page_size=100");
  if (found === null) return;
  const rows = document.getElementById("runs");
  rows.replaceChildren();
  for (const run of found.runs) {
    const row = rows.insertRow();
    const link = text("a", run.run_id);
    link.href = "/ui/runs/" + encodeURIComponent(run.run_id);
    cell(row, link);
    cell(row, run.goal);
    cell(row, run.status, run.status);
    cell(row, run.started_at ? new Date(run.started_at).toLocaleString() : "");
  }
}

function summary(run) {
  const dl = document.getElementById("summary");
  dl.replaceChildren();
  const add = (name, value, className) => {
    dl.append(text("dt", name));
    const dd = value instanceof Node ? document.createElement("dd") : text("dd", value, className);
    if (value instanceof Node) dd.append(value);
    dl.append(dd);
  };
  add("goal", run.goal);
  add("status", run.status + (run.pause_reason ? " (" + run.pause_reason + ")" : ""), run.status);
  const used = run.usage || {};
  add("cost", "$" + (used.cost_usd || 0).toFixed(4) + ", " + (used.model_calls || 0) +
    " model calls, " + (used.tool_calls || 0) + " tool calls");
  const limits = (run.budget && run.budget.limits) || {};
  const set = Object.entries(limits).filter(([, l]) => l.limit !== null);
  add("budget", set.length ? set.map(([n, l]) => n + " " + l.used + "/" + l.limit).join(", ") : "no limits");
  if (run.plan && run.plan.length) {
    add("plan", run.plan.map((p) => p.id + ": " + p.status).join(", "));
  }
  if (run.error) add("error", run.error, "error");
  if (run.links && run.links.temporal_ui) {
    const link = text("a", "open in the Temporal Web UI");
    link.href = run.links.temporal_ui;
    link.rel = "noopener noreferrer";
    add("Temporal", link);
  }
}

function pending(run) {
  const rows = document.getElementById("pending");
  rows.replaceChildren();
  if (run.pending_approvals.length === 0) {
    cell(rows.insertRow(), "Nothing waits for a person.", "muted").colSpan = 3;
    return;
  }
  for (const item of run.pending_approvals) {
    const row = rows.insertRow();
    row.dataset.approval = item.approval_id;
    cell(row, item.approval_id + " (step " + item.step_id + ")");
    const what = document.createElement("div");
    what.append(text("div", item.summary), text("pre", shown(item.arguments)),
      text("code", "digest " + (item.digest || "none"), "digest"));
    cell(row, what);
    const decide = document.createElement("div");
    const comment = document.createElement("input");
    comment.type = "text";
    comment.placeholder = "comment";
    comment.className = "comment";
    const uses = document.createElement("input");
    uses.type = "number";
    uses.min = "1";
    uses.value = "10";
    uses.className = "uses";
    const approve = text("button", "Approve", "approve");
    const reject = text("button", "Reject", "reject");
    const grant = text("button", "Approve and grant", "grant");
    grant.title = "approve, and let the next calls of this tool with these arguments run without asking";
    approve.onclick = () => decideOn(item, "approve", comment.value, null);
    reject.onclick = () => decideOn(item, "reject", comment.value, null);
    grant.onclick = () => decideOn(item, "approve", comment.value, grantOf(item, uses.value));
    decide.append(comment, document.createElement("br"), approve, reject);
    if (item.tool) decide.append(document.createElement("br"), grant, uses, text("span", " uses", "muted"));
    cell(row, decide);
  }
}

function grantOf(item, uses) {
  // The same arguments exactly, for the given number of uses in this run.
  const args = {};
  const called = item.arguments && item.arguments.args ? item.arguments.args : item.arguments;
  for (const [name, value] of Object.entries(called || {})) args[name] = { equals: value };
  return { args: args, uses: Math.max(1, parseInt(uses, 10) || 1) };
}

function steps(run) {
  const rows = document.getElementById("steps");
  rows.replaceChildren();
  for (const step of run.steps) {
    const row = rows.insertRow();
    row.dataset.step = step.id;
    cell(row, step.id + " (" + step.kind + ")");
    cell(row, step.status, step.status);
    cell(row, String(step.attempts));
    const out = step.error !== null && step.error !== undefined ? step.error : step.output;
    cell(row, out === null || out === undefined ? text("span", "", "muted") : text("pre", shown(out)));
  }
}

async function decideOn(item, decision, comment, grant) {
  const url = "/v1/runs/" + encodeURIComponent(runId) + "/approvals/" + encodeURIComponent(item.approval_id);
  // Bound to the call shown: refused (409) if the run asks for another one by now.
  const body = { decision: decision, digest: item.digest };
  if (comment.trim()) body.comment = comment.trim();
  if (grant) body.grant = grant;
  const response = await fetch(url, { method: "POST", headers: headers(), body: JSON.stringify(body) });
  if (response.ok) say(decision + " of " + item.approval_id + " taken", "ok");
  else say(response.status + ": " + await detail(response), "error");
  await loadRun();
}

async function loadRun() {
  document.getElementById("run").hidden = false;
  document.getElementById("title").textContent = "Run " + runId;
  const run = await get("/v1/runs/" + encodeURIComponent(runId));
  if (run === null) return;
  summary(run);
  pending(run);
  steps(run);
  if (!following) follow();
}

async function follow() {
  // The run's events as they happen: a long poll (a stream cannot carry the key's header).
  following = true;
  const rows = document.getElementById("event-rows");
  while (following) {
    const path = "/v1/runs/" + encodeURIComponent(runId) + "/events/page?wait_s=20&after=" + lastEvent;
    let response;
    try {
      response = await fetch(path, { headers: headers() });
    } catch (e) {
      following = false;
      return;
    }
    if (!response.ok) { following = false; return; }
    const page = await response.json();
    for (const event of page.events) {
      lastEvent = Math.max(lastEvent, event.id);
      const row = rows.insertRow();
      row.dataset.type = event.type;
      cell(row, String(event.id));
      cell(row, new Date(event.at).toLocaleTimeString());
      cell(row, event.type);
      cell(row, event.step || "");
      cell(row, text("pre", shown(event.data)));
    }
    if (page.events.length) await loadRun();
    if (page.ended) { following = false; return; }
  }
}

document.getElementById("key-form").onsubmit = (event) => {
  event.preventDefault();
  if (runId) loadRun(); else loadList();
};
if (runId) loadRun(); else loadList();
