// Parley's own tools on the page (DESIGN.md §13): what became of each call a reply made, as the
// server's GET /v1/conversations/{id}/tool-calls says (the permission broker's decision and rule,
// the call's state, its outcome and result), and the owner's edit of a call's arguments. Pure
// functions: app.js polls and answers, view.js draws the cards. A card is drawn from the server's
// rows alone, so a reload or another browser shows the same card; the page only remembers an
// answer it has just sent until the server's row shows it was taken.

import { childrenOf } from "./tree.js";

/** What the card of a call whose outcome is `unknown` says (the executor never runs such a call twice). */
export const UNKNOWN_NOTICE =
  "This call was started but its outcome is unknown: it may or may not have taken effect, and it was not repeated.";

/** A result longer than this is collapsed under its summary. */
const LONG_RESULT = { chars: 600, lines: 12 };

/**
 * A reply whose calls no broker has judged after this long called a client's functions (the OpenAI
 * endpoint's), not Parley's tools: nothing will come for them, and the page stops asking.
 */
const UNCLAIMED_MS = 120_000;

/** A card's phase: the row's state and outcome in one word, as data-phase and the card's label say it. */
export const PHASE_TEXT = {
  deciding: "Waiting for the permission check…",
  asked: "Waiting for your approval",
  running: "Running…",
  ok: "Done",
  error: "Failed",
  denied: "Denied",
  rejected: "Rejected",
  expired: "Expired: nobody approved it in time",
  unknown: "Outcome unknown",
};

/** What a card says between the owner's answer and the server's row showing it. */
export const ANSWERED_TEXT = {
  approve: "Approved; starting…",
  edit: "Edited; checking the new arguments…",
  reject: "Rejecting…",
};

const DECISION_TEXT = { allow: "allowed", ask: "asked you", deny: "denied" };

/** `row` (the server's call, or null before the broker has judged it) as one phase of PHASE_TEXT. */
export function phaseOf(row) {
  if (!row) return "deciding";
  if (row.state === "asked") return "asked";
  if (row.state === "finished") return PHASE_TEXT[row.outcome] ? row.outcome : "error";
  if (row.state === "decided" && row.decision === "deny") return "denied";
  return "running"; // decided to allow, or cleared: the executor has it
}

/** "The permission check asked you (rule: no-rule)". */
export function decisionText(row) {
  const decided = DECISION_TEXT[row.decision] || row.decision;
  return `The permission check ${decided}${row.rule ? ` (rule: ${row.rule})` : ""}`;
}

/** A call's arguments as a card shows them: indented JSON, or the text as it came when it is not JSON. */
export function prettyArguments(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text ?? "";
  }
}

/** The owner's edited arguments: {value} for a JSON object, else {error} saying what is wrong. */
export function parseArguments(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { error: `This is not valid JSON (${err.message}). Nothing was sent.` };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return { error: "The arguments must be a JSON object, in braces: {…}. Nothing was sent." };
  }
  return { value };
}

/** Whether a result is long enough to be collapsed. */
export function isLong(text) {
  return text.length > LONG_RESULT.chars || text.split("\n").length > LONG_RESULT.lines;
}

/** The calls `message` made (OpenAI's shape), each with its server row from `rows` (id → row) once there is one. */
export function callsOf(message, rows) {
  return (message.tool_calls || []).map((c) => ({
    id: c.id,
    name: c.function?.name ?? "",
    arguments: c.function?.arguments ?? "",
    row: rows.get(c.id) ?? null,
  }));
}

/** Whether any message of the chat called a tool. */
export const anyCalls = (messages) => [...messages.values()].some((m) => m.tool_calls?.length);

/**
 * The message that continues after `reply`'s calls (the broker appends a `tool` message per call,
 * then the next reply), or null while there is none yet.
 */
export function continuationOf(messages, reply) {
  const seen = new Set();
  for (let id = reply.id; !seen.has(id); ) {
    seen.add(id);
    const kids = childrenOf(messages, id);
    const next = kids.find((k) => k.role !== "tool");
    if (next) return next;
    const tool = kids.at(-1);
    if (!tool) return null;
    id = tool.id;
  }
  return null; // a cycle only corrupt data could make
}

/**
 * What the page waits for on `path` (the shown branch): "asked" when only the owner's answers are
 * missing, "calls" while a call is being judged or run, "continuation" when every call has ended
 * and the next reply is not in `messages` yet; null when nothing. `rows`: call id → server row.
 */
export function waitingOn(messages, path, rows, now = Date.now()) {
  let waiting = null;
  for (const m of path) {
    if (m.role !== "assistant" || !m.tool_calls?.length || m.status === "streaming") continue;
    const calls = callsOf(m, rows);
    const age = now - Date.parse(m.created_at || "");
    if (calls.every((c) => !c.row) && age > UNCLAIMED_MS) continue; // a client's own functions
    const open = calls.filter((c) => c.row?.state !== "finished");
    if (open.some((c) => c.row?.state !== "asked")) return "calls";
    if (open.length) waiting = "asked";
    else if (!continuationOf(messages, m)) return "continuation";
  }
  return waiting;
}
