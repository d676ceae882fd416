"""The page's reply renderer (gateway/static/markdown.js: markdown-it, then DOMPurify) in Chromium.

A streaming reply is re-rendered whole as it grows (app.js redraws it at most once a frame, and
only after five times its last redraw's cost), so what matters is one render's cost at a reply's
length. Prints milliseconds per render of a Markdown reply of 1, 4 and 16 thousand characters,
parse and sanitise apart, next to the floor measured in the same page: putting the same HTML into
the DOM with no parsing of Markdown and no sanitising. No server: Playwright serves gateway/static
itself, with the gateway's own security headers. Run: `python -m bench.markdown` (needs Debian's
chromium, as tests/browser does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.security_headers import security_headers

STATIC = Path(__file__).resolve().parents[1] / "gateway" / "static"
ORIGIN = "http://parley.bench"
CHROMIUM = "/usr/bin/chromium"

#: A reply as models write them: headings, emphasis, inline code, links, lists, a fenced block.
UNIT = (
    "## Step\n\nSome **bold** text with `code`, a [link](https://example.com/x) and more words to fill a line.\n"
    "- item one\n- item two\n\n```py\nfor i in range(10):\n    print(i)\n```\n\n"
)

MEASURE = """async ({unit, sizes}) => {
  const { default: markdownit } = await import('/static/vendor/markdown-it.esm.min.mjs');
  const { renderMarkdown, sanitize } = await import('/static/markdown.js');
  const md = markdownit({ html: false, breaks: true });
  const host = document.createElement('div');
  host.className = 'md';
  document.body.append(host);
  const each = (fn) => {  // ms per call, best of three batches: the least disturbed
    let best = Infinity;
    for (let batch = 0; batch < 3; batch++) {
      const began = performance.now();
      for (let i = 0; i < 20; i++) fn();
      best = Math.min(best, (performance.now() - began) / 20);
    }
    return best;
  };
  return sizes.map((size) => {
    let source = '';
    while (source.length < size) source += unit;
    const html = md.render(source);
    const floor = () => { const t = document.createElement('template'); t.innerHTML = html; host.replaceChildren(t.content); };
    return {
      chars: source.length,
      render: each(() => host.replaceChildren(renderMarkdown(source))),
      parse: each(() => md.render(source)),
      sanitise: each(() => sanitize(html)),
      floor: each(floor),
    };
  });
}"""


def _serve(route: Any) -> None:
    """The page (empty) and gateway/static's files, each with the gateway's security headers."""
    headers = {name.decode(): value.decode() for name, value in security_headers(0)}
    url = route.request.url
    if url == f"{ORIGIN}/":
        route.fulfill(status=200, body="<!doctype html><title>bench</title>", headers={**headers, "content-type": "text/html"})
        return
    path = (STATIC / url.removeprefix(f"{ORIGIN}/static/")).resolve()
    if not path.is_relative_to(STATIC) or not path.is_file():
        route.fulfill(status=404, body="")
        return
    kind = "text/javascript" if path.suffix in (".js", ".mjs") else "text/plain"
    route.fulfill(status=200, body=path.read_bytes(), headers={**headers, "content-type": kind})


def main(sizes: tuple[int, ...] = (1_000, 4_000, 16_000)) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.route(f"{ORIGIN}/**", _serve)
            page.goto(f"{ORIGIN}/")
            rows = page.evaluate(MEASURE, {"unit": UNIT, "sizes": list(sizes)})
        finally:
            browser.close()
    print(f"{'chars':>7} {'render ms':>10} {'parse':>7} {'sanitise':>9} {'floor':>7} {'render/floor':>13}")
    for r in rows:
        ratio = r["render"] / r["floor"] if r["floor"] else float("inf")
        print(f"{r['chars']:>7} {r['render']:>10.2f} {r['parse']:>7.2f} {r['sanitise']:>9.2f} {r['floor']:>7.2f} {ratio:>12.1f}x")


if __name__ == "__main__":
    main()
