// The approvals inbox (with page.js: the key lives in the form field only).
"use strict";
// headers, say, cell and detail are page.js's.
const labelInput = document.getElementById("label");
const inbox = document.getElementById("inbox");

async function load() {
  const params = new URLSearchParams();
  if (labelInput.value.trim()) params.append("label", labelInput.value.trim());
  let response;
  try {
    response = await fetch("/v1/approvals?" + params, { headers: headers() });
  } catch (e) {
    say("The API did not answer: " + e, "error");
    return;
  }
  if (!response.ok) {
    say(response.status + ": " + await detail(response), "error");
    return;
  }
  if (message.className === "error") say("");
  render((await response.json()).approvals);
}

function render(approvals) {
  inbox.replaceChildren();
  if (approvals.length === 0) {
    const row = inbox.insertRow();
    const td = cell(row, "Nothing waits for a person.");
    td.colSpan = 5;
    td.className = "muted";
    return;
  }
  for (const item of approvals) {
    const row = inbox.insertRow();
    row.dataset.approval = item.run_id + "/" + item.approval_id;
    const run = document.createElement("div");
    const id = document.createElement("code");
    id.textContent = item.run_id;
    run.append(id, document.createElement("br"), item.goal);
    cell(row, run);
    cell(row, item.step_id + " (" + item.approval_id + ")");
    const what = document.createElement("div");
    const summary = document.createElement("div");
    summary.textContent = item.summary;
    const args = document.createElement("pre");
    args.textContent = JSON.stringify(item.arguments, null, 2);
    const digest = document.createElement("code");
    digest.className = "digest";
    digest.textContent = "digest " + (item.digest || "none");
    what.append(summary, args, digest);
    cell(row, what);
    cell(row, new Date(item.requested_at).toLocaleString());
    const decide = document.createElement("div");
    const comment = document.createElement("input");
    comment.type = "text";
    comment.placeholder = "comment";
    comment.className = "comment";
    const approve = document.createElement("button");
    approve.textContent = "Approve";
    approve.className = "approve";
    const reject = document.createElement("button");
    reject.textContent = "Reject";
    reject.className = "reject";
    approve.onclick = () => decideOn(item, "approve", comment.value);
    reject.onclick = () => decideOn(item, "reject", comment.value);
    decide.append(comment, document.createElement("br"), approve, reject);
    cell(row, decide);
  }
}

async function decideOn(item, decision, comment) {
  const url = "/v1/runs/" + encodeURIComponent(item.run_id) + "/approvals/" +
    encodeURIComponent(item.approval_id);
  // Bound to the call shown: refused (409) if the run asks for another one by now.
  const body = { decision: decision, digest: item.digest };
  if (comment.trim()) body.comment = comment.trim();
  const response = await fetch(url, { method: "POST", headers: headers(), body: JSON.stringify(body) });
  if (response.ok) {
    say(decision + " of " + item.approval_id + " (" + item.run_id + ") taken", "ok");
  } else {
    say(response.status + ": " + await detail(response), "error");
  }
  await load();
}

document.getElementById("key-form").onsubmit = (event) => { event.preventDefault(); load(); };
load();
