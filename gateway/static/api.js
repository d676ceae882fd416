// The HTTP API as the page uses it: the API key, JSON calls, streamed replies, errors.
//
// Every call sends `Authorization: Bearer <key>`. A non-2xx answer becomes an
// ApiError with the body's {error: {code, message, retry_after}} and, failing
// that, the Retry-After header.

const KEY = "parley.apiKey";

export const auth = {
  get key() {
    return localStorage.getItem(KEY);
  },
  signIn(key) {
    localStorage.setItem(KEY, key);
  },
  signOut() {
    localStorage.removeItem(KEY);
  },
};

export class ApiError extends Error {
  constructor(status, code, message, retryAfter) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter; // seconds, or null
  }

  get retryable() {
    return this.status === 429 || this.status >= 500 || this.status === 0;
  }
}

async function call(method, path, { body, headers = {}, signal } = {}) {
  const init = { method, signal, headers: { Authorization: `Bearer ${auth.key}`, ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "network", "The server could not be reached.", null);
  }
  if (!response.ok) throw await toError(response);
  return response;
}

async function toError(response) {
  let error = {};
  try {
    error = (await response.json()).error || {};
  } catch {
    // not JSON (a proxy's page): fall back to the status line
  }
  const header = Number(response.headers.get("Retry-After"));
  const retryAfter = error.retry_after ?? (Number.isFinite(header) && header > 0 ? header : null);
  return new ApiError(response.status, error.code || "http_error", error.message || `HTTP ${response.status}`, retryAfter);
}

const json = async (method, path, body) => {
  const response = await call(method, path, { body });
  const text = await response.text();
  return text ? JSON.parse(text) : null;
};

const enc = encodeURIComponent;

export const api = {
  /** The user's chats; `archived` lists only the archived ones. */
  conversations: async (archived = false) =>
    (await json("GET", archived ? "/v1/conversations?archived=true" : "/v1/conversations")).conversations,
  createConversation: (title) => json("POST", "/v1/conversations", title === undefined ? {} : { title }),
  conversation: (id) => json("GET", `/v1/conversations/${enc(id)}`),
  /** `changes`: {title} and/or {archived}; answers the conversation's summary. */
  updateConversation: (id, changes) => json("PATCH", `/v1/conversations/${enc(id)}`, changes),
  deleteConversation: (id) => json("DELETE", `/v1/conversations/${enc(id)}`),
  /** The ids of the models a message may ask for ("auto" among them), in the server's order. */
  models: async () => (await json("GET", "/v1/models")).data.map((m) => m.id),
  selectLeaf: (id, leafId) => json("PUT", `/v1/conversations/${enc(id)}/leaf`, { leaf_id: leafId }),
  stop: (replyId) => json("POST", `/v1/messages/${enc(replyId)}/stop`),

  /** Our own time to first token (what the user saw); best effort, never shown as an error. */
  telemetry: (ttftMs) => call("POST", "/v1/telemetry", { body: { ttft_ms: ttftMs, client: "web" } }).catch(() => {}),

  /** The SSE response of a new message; `parentId` undefined continues the selected branch. */
  postMessage(conversationId, { content, clientMessageId, parentId, model }, signal) {
    const body = { content, client_message_id: clientMessageId };
    if (parentId !== undefined) body.parent_id = parentId;
    if (model) body.model = model;
    return call("POST", `/v1/conversations/${enc(conversationId)}/messages`, { body, signal });
  },

  /** The SSE response of a new sibling of assistant message `messageId`. */
  regenerate(messageId, clientMessageId, model, signal) {
    const body = { client_message_id: clientMessageId };
    if (model) body.model = model;
    return call("POST", `/v1/messages/${enc(messageId)}/regenerate`, { body, signal });
  },

  /** The SSE response of a reply from the start, or after `cursor` when given. */
  resume(replyId, cursor, signal) {
    const headers = cursor ? { "Last-Event-ID": cursor } : {};
    return call("GET", `/v1/messages/${enc(replyId)}/stream`, { headers, signal });
  },
};
