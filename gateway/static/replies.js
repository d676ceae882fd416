// One streamed reply: its SSE events applied to a message, its cursor kept for resuming.
//
// The cursor, the text shown so far and whether a worker restarted the reply are
// kept in sessionStorage under the reply's id while it streams, so a reload can
// resume with Last-Event-ID and keep what was already on screen; they are dropped
// when the reply ends (and on sign-out). Nothing is kept for a finished reply.

import { readEvents } from "./sse.js";
import { statusOf } from "./tree.js";

const PREFIX = "parley.reply.";

export const cursors = {
  get(replyId) {
    try {
      return JSON.parse(sessionStorage.getItem(PREFIX + replyId));
    } catch {
      return null;
    }
  },
  put(replyId, cursor, text, restarted = false) {
    if (cursor) sessionStorage.setItem(PREFIX + replyId, JSON.stringify({ cursor, text, restarted }));
  },
  drop(replyId) {
    sessionStorage.removeItem(PREFIX + replyId);
  },
  clear() {
    for (const key of Object.keys(sessionStorage)) if (key.startsWith(PREFIX)) sessionStorage.removeItem(key);
  },
};

/** The stream ended without `done` or `error` (a dropped connection). */
export class StreamCut extends Error {}

/** The reply ended with an `error` event. */
export class ReplyFailed extends Error {
  constructor(data) {
    super(data.message || "The reply failed.");
    this.code = data.code;
    this.retryAfter = data.retry_after ?? null;
  }
}

/**
 * Reads `response` to its end. `hooks.head(data)` returns the reply message to
 * write into (called on the `message` event; for a resume the reply is passed
 * as `reply` and may see no `message` event); `hooks.changed(reply)` after
 * each delta, each `restarted` (the text shown is cut back to where the new
 * attempt continues; the reply is marked `restarted`, and `hooks.restarted(reply)` follows) and at the end. The `done` event's usage,
 * model, citations, citation_status, documents_note and tool_calls (as far as it has them) are kept on the reply. Resolves with the `done` data; throws ReplyFailed
 * or StreamCut.
 */
export async function follow(response, hooks, reply = null) {
  for await (const { event, data, id } of readEvents(response)) {
    if (event === "message") {
      reply = hooks.head(data);
      cursors.put(reply.id, id, reply.content, !!reply.restarted);
    } else if (event === "delta" && reply) {
      if (hooks.firstToken) {
        hooks.firstToken();
        hooks.firstToken = null;
      }
      reply.content += data.text;
      if (data.model) reply.model = data.model; // on an attempt's first chunk
      cursors.put(reply.id, id, reply.content, !!reply.restarted);
      hooks.changed(reply);
    } else if (event === "restarted" && reply) {
      // Another worker took the reply over and continues from `offset_chars` characters (code
      // points, hence Array.from) of it: keep those, the deltas that follow append to them.
      reply.content = Array.from(reply.content).slice(0, data.offset_chars).join("");
      reply.restarted = true;
      cursors.put(reply.id, id, reply.content, !!reply.restarted);
      hooks.changed(reply);
      hooks.restarted?.(reply);
    } else if (event === "done" && reply) {
      reply.status = statusOf(data.finish_reason);
      reply.finish_reason = data.finish_reason;
      // Moderation cut the reply: what streamed so far is withdrawn, and the notice takes its place.
      if (data.notice) reply.content = data.notice;
      if (data.moderation) reply.moderation = data.moderation;
      // What answered and how long: the stored message says so too, once the page re-reads it.
      if (data.model) reply.model = data.model;
      if (data.usage?.completion_tokens > 0) reply.tokens = data.usage.completion_tokens;
      // A turn with documents: what the reply cited (or that it cited nothing), and what was indexed.
      if (data.citations) reply.citations = data.citations;
      if (data.citation_status) reply.citation_status = data.citation_status;
      if (data.documents_note) reply.documents_note = data.documents_note;
      // Calls of Parley's tools (or a client's functions): each gets its card under the reply.
      if (data.tool_calls?.length) reply.tool_calls = data.tool_calls;
      cursors.drop(reply.id);
      hooks.changed(reply);
      return data;
    } else if (event === "error" && reply) {
      reply.status = data.code === "rejected" ? "rejected" : "failed";
      reply.finish_reason = data.code;
      cursors.drop(reply.id);
      hooks.changed(reply);
      throw new ReplyFailed(data);
    }
  }
  throw new StreamCut("The connection to the reply was lost.");
}
