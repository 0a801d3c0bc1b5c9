// What the API's pages share: the key (in the form field only: no storage a script of
// another page of this origin could read), requests' headers, the message line, table
// cells that hold text (never markup), and a refusal's words.
"use strict";
const keyInput = document.getElementById("key");
const message = document.getElementById("message");

function headers() {
  const key = keyInput.value.trim();
  const sent = { "content-type": "application/json" };
  if (key) sent["authorization"] = "Bearer " + key;
  return sent;
}

function say(text, kind) {
  message.textContent = text;
  message.className = kind || "";
}

function cell(row, content, className) {
  const td = document.createElement("td");
  if (content instanceof Node) td.appendChild(content); else td.textContent = content;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

async function detail(response) {
  try {
    const body = await response.json();
    return typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
  } catch (e) {
    return response.statusText;
  }
}
