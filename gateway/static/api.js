// The HTTP API as the page uses it: the web session, JSON calls, streamed replies, uploads, errors.
//
// The page signs in with an email and password (POST /v1/auth/sign-in). The session itself is an
// HttpOnly cookie that no script can read; what the page holds is the session's CSRF token, in this
// module's memory only, sent as X-CSRF-Token on every write. Nothing of the session is in
// localStorage or sessionStorage, so a script injected into the page cannot carry a credential away
// for later. A non-2xx answer becomes an ApiError with the body's {error: {code, message,
// retry_after}} and, failing that, the Retry-After header; a 401 means the session has ended.

const UNSAFE = new Set(["POST", "PUT", "PATCH", "DELETE"]);
let session = null; // {user_id, csrf_token, idle_timeout_s, expires_at} while signed in

export const auth = {
  get signedIn() {
    return session !== null;
  },
  get userId() {
    return session?.user_id ?? null;
  },
  /** The session the browser's cookie names, if it is still live (a reload, a second tab). */
  async restore() {
    try {
      session = await json("GET", "/v1/auth/session");
    } catch (err) {
      if (err.status !== 401) throw err;
      session = null;
    }
    return session;
  },
  async signIn(email, password) {
    session = await json("POST", "/v1/auth/sign-in", { email, password });
    return session;
  },
  /** Ends the session on the server too; signed out here whatever the server answers. */
  async signOut() {
    if (!session) return;
    try {
      await call("POST", "/v1/auth/sign-out");
    } catch {
      // the cookie expires on its own; nothing more the page can do
    } finally {
      session = null;
    }
  },
  /** The server said the session has ended (a 401). */
  ended() {
    session = null;
  },
};

/** The headers of a request as the session needs them: its CSRF token on writes. */
function sessionHeaders(method) {
  return session && UNSAFE.has(method) ? { "X-CSRF-Token": session.csrf_token } : {};
}

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

async function call(method, path, { body, raw, headers = {}, signal } = {}) {
  const init = { method, signal, headers: { ...sessionHeaders(method), ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  } else if (raw !== undefined) {
    init.body = raw; // sent as it is, under the Content-Type in `headers`
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
  return apiError(response.status, error, response.headers.get("Retry-After"));
}

/** The ApiError of a non-2xx answer: its body's `error` object, else its status line. */
function apiError(status, error, retryHeader) {
  const header = Number(retryHeader);
  const retryAfter = error.retry_after ?? (Number.isFinite(header) && header > 0 ? header : null);
  return new ApiError(status, error.code || "http_error", error.message || `HTTP ${status}`, retryAfter);
}

const json = async (method, path, body) => {
  const response = await call(method, path, { body });
  const text = await response.text();
  return text ? JSON.parse(text) : null;
};

const enc = encodeURIComponent;

export const api = {
  /** {password, oidc}: how this Parley signs people in. */
  signInMethods: () => json("GET", "/v1/auth/methods"),
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
  /** `rating`: "up" or "down"; null takes the reply's rating back. */
  rate: (id, messageId, rating) =>
    rating
      ? json("PUT", `/v1/conversations/${enc(id)}/messages/${enc(messageId)}/feedback`, { rating })
      : call("DELETE", `/v1/conversations/${enc(id)}/messages/${enc(messageId)}/feedback`),

  /**
   * Imports ChatGPT's export (conversations.json or its zip) or Parley's own; answers {imported, unchanged,
   * conversations: [{id, status, …}]}. A file with any bad part is refused whole (an ApiError naming where).
   */
  importChats: async (file) => {
    const zip = file.type === "application/zip" || /\.zip$/i.test(file.name);
    const headers = { "Content-Type": zip ? "application/zip" : "application/json" };
    return (await call("POST", "/v1/imports", { raw: file, headers })).json();
  },

  /** A read-only link to the chat's selected branch: {id, path, expires_at}. */
  createShare: (id) => json("POST", `/v1/conversations/${enc(id)}/shares`, {}),
  /** The chat's live links. */
  shares: async (id) => (await json("GET", `/v1/conversations/${enc(id)}/shares`)).shares,
  revokeShare: (id, shareId) => json("DELETE", `/v1/conversations/${enc(id)}/shares/${enc(shareId)}`),
  /** A shared chat copied into this account: {id, status}. */
  forkShare: (secret) => json("POST", `/v1/shares/${enc(secret)}/fork`),

  /** Our own time to first token (what the user saw); best effort, never shown as an error. */
  telemetry: (ttftMs) => call("POST", "/v1/telemetry", { body: { ttft_ms: ttftMs, client: "web" } }).catch(() => {}),

  /**
   * The SSE response of a new message; `parentId` undefined continues the selected branch; `tools`:
   * names of Parley's tools (the operator's, or the user's organisation's) the turn offers the model.
   */
  postMessage(conversationId, { content, clientMessageId, parentId, model, documentIds, tools }, signal) {
    const body = { content, client_message_id: clientMessageId };
    if (parentId !== undefined) body.parent_id = parentId;
    if (model) body.model = model;
    if (documentIds?.length) body.document_ids = documentIds;
    if (tools?.length) body.tools = tools;
    return call("POST", `/v1/conversations/${enc(conversationId)}/messages`, { body, signal });
  },

  /** The SSE response of a new sibling of assistant message `messageId`. */
  regenerate(messageId, clientMessageId, model, signal) {
    const body = { client_message_id: clientMessageId };
    if (model) body.model = model;
    return call("POST", `/v1/messages/${enc(messageId)}/regenerate`, { body, signal });
  },

  /** Every call of Parley's tools in the chat: decision, rule, state, outcome, result (DESIGN.md §13). */
  toolCalls: async (id) => (await json("GET", `/v1/conversations/${enc(id)}/tool-calls`)).tool_calls,
  /** `answer`: approve, reject, or edit with `args` (an object); a 409 when the call no longer waits. */
  answerToolCall: (id, callId, answer, args) =>
    json("POST", `/v1/conversations/${enc(id)}/tool-calls/${enc(callId)}`, answer === "edit" ? { answer, arguments: args } : { answer }),

  /** The user's documents, newest first as the server lists them. */
  documents: async () => (await json("GET", "/v1/documents")).data,
  document: (id) => json("GET", `/v1/documents/${enc(id)}`),
  /** {document_id, filename, page, text, method}; a 404 `page_not_ready` while the page is not indexed. */
  documentPage: (id, page) => json("GET", `/v1/documents/${enc(id)}/pages/${enc(page)}`),
  deleteDocument: (id) => json("DELETE", `/v1/documents/${enc(id)}`),

  /**
   * Uploads `file` (attached to `conversationId` when given) and resolves with the document the
   * server answers (202, status "processing"). XMLHttpRequest, not fetch: only it reports upload
   * progress, as `onProgress(sentBytes, totalBytes)`.
   */
  uploadDocument(file, conversationId, onProgress) {
    const form = new FormData();
    form.append("file", file, file.name);
    if (conversationId) form.append("conversation_id", conversationId);
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("POST", "/v1/documents");
      for (const [name, value] of Object.entries(sessionHeaders("POST"))) xhr.setRequestHeader(name, value);
      xhr.responseType = "text";
      xhr.upload.onprogress = (e) => onProgress?.(e.loaded, e.lengthComputable ? e.total : file.size);
      xhr.onerror = () => reject(new ApiError(0, "network", "The server could not be reached.", null));
      xhr.onload = () => {
        let body = null;
        try {
          body = xhr.responseText ? JSON.parse(xhr.responseText) : null;
        } catch {
          // not JSON (a proxy's page): the status line says what happened
        }
        if (xhr.status >= 200 && xhr.status < 300 && body) return resolve(body);
        reject(apiError(xhr.status, body?.error || {}, xhr.getResponseHeader("Retry-After")));
      };
      xhr.send(form);
    });
  },

  /** The SSE response of a reply from the start, or after `cursor` when given. */
  resume(replyId, cursor, signal) {
    const headers = cursor ? { "Last-Event-ID": cursor } : {};
    return call("GET", `/v1/messages/${enc(replyId)}/stream`, { headers, signal });
  },
};
