// Server-Sent Events over any fetch() response (replies stream over POST, so no EventSource).
//
// The wire format, as tools/client.py reads it too: `id:`, `event:` and
// `data:` lines; a blank line ends an event; `:` lines are keep-alive comments.

/** Yields {event, data, id} for each event of `response`'s body; `data` is parsed JSON. */
export async function* readEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = "message";
  let data = [];
  let id = null;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      // A trailing "\r" may be the first half of "\r\n": keep it for the next chunk.
      const held = buffer.endsWith("\r") ? "\r" : "";
      const lines = (held ? buffer.slice(0, -1) : buffer).split(/\r\n|\r|\n/);
      buffer = lines.pop() + held;
      for (const line of lines) {
        if (line === "") {
          if (data.length) yield { event, data: JSON.parse(data.join("\n")), id };
          event = "message";
          data = [];
          id = null;
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const name = colon < 0 ? line : line.slice(0, colon);
          let field = colon < 0 ? "" : line.slice(colon + 1);
          if (field.startsWith(" ")) field = field.slice(1);
          if (name === "event") event = field;
          else if (name === "data") data.push(field);
          else if (name === "id") id = field;
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}
