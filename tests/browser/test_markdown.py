"""The reply renderer in the browser (gateway/static/markdown.js: markdown-it, then DOMPurify): what a
model (or an attacker) writes never becomes markup or runs, it is shown as text, and the Markdown the
page relies on still renders, under the page's own CSP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import new_context

#: Before the page's first script: every CSP violation, and every alert() a payload would call.
WATCH = """
window.__violations = [];
window.__alerts = [];
document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(e.violatedDirective));
window.alert = (x) => window.__alerts.push(String(x));
"""

#: Renders into the live page (a handler or script that got through would run there), then reads back.
RENDER = """async ({source, raw}) => {
  const { renderMarkdown, sanitize } = await import('/static/markdown.js');
  const host = document.createElement('div');
  host.className = 'md';
  document.body.append(host);
  host.append(raw ? sanitize(source) : renderMarkdown(source));
  const all = [...host.querySelectorAll('*')];
  const out = {
    html: host.innerHTML,
    text: host.textContent,
    tags: all.map((e) => e.tagName.toLowerCase()),
    attrs: [...new Set(all.flatMap((e) => [...e.attributes].map((a) => a.name)))],
    hrefs: [...host.querySelectorAll('a[href]')].map((a) => a.getAttribute('href')),
    links: [...host.querySelectorAll('a')].map((a) => [a.target, a.rel]),
  };
  host.remove();
  return out;
}"""

#: Two frames: long enough for an image's error or an svg's load to fire, had one got through.
SETTLE = "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))"

TAGS = {"p", "br", "strong", "em", "s", "code", "pre", "a", "ul", "ol", "li", "blockquote", "hr"}
TAGS |= {"h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td"}
ATTRS = {"href", "title", "target", "rel", "class", "start"}
SAFE_LINK = ("http://", "https://", "mailto:")


@pytest.fixture(scope="module")
def shared(browser, web_stack) -> Iterator[Any]:
    """One page for the module (signed out is enough: it loads every module). Each case renders into a host it
    removes, and what a case set off is checked and cleared after it, so the cases share the page's load:
    loading it afresh for each of them cost the suite ~50 s."""
    context = new_context(browser)
    page = context.new_page()
    page.add_init_script(WATCH)
    page.goto(web_stack.url + "/")
    page.evaluate(SETTLE)
    assert page.evaluate("window.__violations") == [], "the page's own modules broke the CSP"
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def loaded(shared) -> Any:
    """The page, and afterwards: no payload ran."""
    yield shared
    shared.evaluate(SETTLE)
    assert shared.evaluate("window.__alerts.splice(0)") == [], "a payload ran"


@pytest.fixture
def watched(loaded) -> Any:
    """...and nothing even tried to break the CSP: not the page's modules (no eval, no inline style), not
    a reply. (The parser DOMPurify uses reports the inline handlers it reads, though none runs: that no
    violation is seen also says that markdown-it never handed it one.)"""
    loaded.evaluate(SETTLE)
    loaded.evaluate("window.__violations.splice(0)")  # a raw-HTML case's reports before this one (not watched)
    yield loaded
    loaded.evaluate(SETTLE)
    assert loaded.evaluate("window.__violations.splice(0)") == [], "the page or a reply broke the CSP"


@pytest.fixture
def render(watched) -> Any:
    return lambda source: watched.evaluate(RENDER, {"source": source, "raw": False})


def assert_inert(out: dict[str, Any]) -> None:
    assert set(out["tags"]) <= TAGS, out["html"]
    assert set(out["attrs"]) <= ATTRS, out["html"]
    assert all(h.startswith(SAFE_LINK) for h in out["hrefs"]), out["hrefs"]


#: (what a reply says, text the reader sees of it): raw HTML, hostile link targets (by scheme, case,
#: entity, whitespace, angle brackets, reference, nesting), images, code fences and their info strings.
HOSTILE = [
    ("<img src=x onerror=alert(1)>", "<img src=x onerror=alert(1)>"),
    ("<script>alert(1)</script>", "<script>alert(1)</script>"),
    ("<svg onload=alert(1)>", "<svg onload=alert(1)>"),
    ("<svg><script>alert(1)</script></svg>", "<svg><script>alert(1)</script></svg>"),
    ('<a href="javascript:alert(1)">click</a>', '<a href="javascript:alert(1)">click</a>'),
    ('<iframe src="javascript:alert(1)"></iframe>', "<iframe"),
    ('<div style="background:url(javascript:alert(1))">x</div>', "<div style="),
    ("<style>body{display:none}</style>", "<style>body{display:none}</style>"),
    ('<form action="https://x.example"><button>go</button></form>', "<form"),
    ('<noscript><p title="</noscript><img src=x onerror=alert(1)>">', "<noscript><p title="),
    ("&lt;img src=x onerror=alert(1)&gt;", "<img src=x onerror=alert(1)>"),
    ("&#60;script&#62;alert(1)&#60;/script&#62;", "<script>alert(1)</script>"),
    ("[click](javascript:alert(1))", "[click](javascript:alert(1))"),
    ("[click](JaVaScRiPt:alert(1))", "[click](JaVaScRiPt:alert(1))"),
    ("[click](&#106;avascript:alert(1))", "[click](javascript:alert(1))"),
    ("[click](java&#x09;script:alert(1))", "[click](java\tscript:alert(1))"),
    ("[click](<javascript:alert(1)>)", "[click](<javascript:alert(1)>)"),
    ("[click](vbscript:msgbox(1))", "[click](vbscript:msgbox(1))"),
    ("[click](file:///etc/passwd)", "[click](file:///etc/passwd)"),
    ("[click](//x.example/a)", "[click](//x.example/a)"),
    ("[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)", "[click](data:text/html;base64,"),
    ("![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)", "![x](data:image/svg+xml;base64,"),
    ("![y](javascript:alert(1))", "![y](javascript:alert(1))"),
    ("<javascript:alert(1)>", "<javascript:alert(1)>"),
    ('<https://x.example/"onmouseover="alert(1)>', 'https://x.example/"onmouseover="alert(1)'),
    ('[click](https://x.example/" onmouseover="alert(1))', '[click](https://x.example/" onmouseover="alert(1))'),
    ('[click](https://x.example "t\\" onmouseover=alert(1)")', "click"),
    ("[click][ref]\n\n[ref]: javascript:alert(1)", "[ref]: javascript:alert(1)"),
    ('[click][ref]\n\n[ref]: https://x.example/ "t" onmouseover=alert(1)', "onmouseover=alert(1)"),
    ("[click]\n\n[click]: data:text/html,<script>alert(1)</script>", "[click]: data:text/html,<script>"),
    ("[[inner](javascript:alert(1))](https://x.example/)", "[inner](javascript:alert(1))"),
    ("[outer [inner](https://x.example/)](javascript:alert(1))", "[outer inner](javascript:alert(1))"),
    ("[a](https://x.example/)[b](javascript:alert(1))", "a[b](javascript:alert(1))"),
    ("```\n</code></pre><img src=x onerror=alert(1)>\n```", "</code></pre><img src=x onerror=alert(1)>"),
    ("```html\n<script>alert(1)</script>\n```", "<script>alert(1)</script>"),
    ('```" onmouseover="alert(1)\nx\n```', "x"),
    ("~~~<img src=x onerror=alert(1)>\nx\n~~~", "x"),
    ("    <img src=x onerror=alert(1)>", "<img src=x onerror=alert(1)>"),
    ("`<iframe src=//x>`", "<iframe src=//x>"),
    ("**<svg onload=alert(1)>**", "<svg onload=alert(1)>"),
    ("*<img src=x onerror=alert(1)>*", "<img src=x onerror=alert(1)>"),
    ("| <img src=x onerror=alert(1)> | b |\n|---|---|\n| [c](javascript:alert(1)) | d |", "[c](javascript:alert(1))"),
]


@pytest.mark.parametrize(("attack", "shown"), HOSTILE, ids=[f"{i:02d}" for i in range(len(HOSTILE))])
def test_untrusted_text_never_becomes_markup(render, attack: str, shown: str) -> None:
    out = render(attack)
    assert_inert(out)
    assert shown in out["text"], out["html"]


#: DOMPurify alone, on HTML that markdown-it never writes: the second lock holds without the first.
RAW_HTML = [
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)" onclick="alert(1)">x</a>',
    '<a href=" java\tscript:alert(1)">x</a>',
    '<a href="data:text/html,<script>alert(1)</script>">x</a>',
    '<a href="//x.example/">x</a><a href="/v1/me">y</a><a href="ftp://x.example/">z</a><a href="tel:1">t</a>',
    '<a href="https://x.example/" style="color:red" data-x="1" id="y" name="z">ok</a>',
    '<svg><animate onbegin="alert(1)" attributeName="x" dur="1s"></animate></svg>',
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>">',
    '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    '<form action="https://x.example/"><input name="q"><button>go</button></form>',
    '<p style="background:url(https://x.example/)">t</p>',
    '<details open ontoggle="alert(1)"><summary>s</summary></details>',
    '<base href="https://x.example/"><link rel="stylesheet" href="https://x.example/s.css">',
]


@pytest.mark.parametrize("html", RAW_HTML, ids=[f"{i:02d}" for i in range(len(RAW_HTML))])
def test_the_sanitiser_alone_keeps_only_the_listed_tags_and_attributes(loaded, html: str) -> None:
    assert_inert(loaded.evaluate(RENDER, {"source": html, "raw": True}))


def test_the_markdown_subset(render) -> None:
    out = render("Use **bold**, *it*, `x < y` and [docs](https://example.com/a_b).\n\n- one\n- two\n\n```py\nprint('<b>')\n```")
    assert out["tags"] == ["p", "strong", "em", "code", "a", "ul", "li", "li", "pre", "code"]
    assert out["hrefs"] == ["https://example.com/a_b"]
    assert "print('<b>')" in out["text"] and "x < y" in out["text"]
    assert 'class="language-py"' in out["html"]


def test_what_replies_write_renders_as_the_page_shows_it(render) -> None:
    out = render("# Title\n## Part\n###### Small\nline one\nline two")
    assert out["tags"] == ["h3", "h4", "h6", "p", "br"], "headings sit under the page's own h1 and h2; a newline breaks"

    out = render("[a](https://x.example/a) <https://x.example/b> <me@x.example> [c][r]\n\n[r]: http://x.example/c")
    assert out["hrefs"] == ["https://x.example/a", "https://x.example/b", "mailto:me@x.example", "http://x.example/c"]
    assert out["links"] == [["_blank", "noopener noreferrer nofollow"]] * 4

    out = render("| left | mid | right |\n|:--|:-:|--:|\n| 1 | 2 | 3 |")
    assert "style" not in out["html"], "the CSP refuses style attributes: alignment is a class"
    assert out["html"].count('class="align-center"') == 2 and out["html"].count('class="align-right"') == 2

    out = render("![a chart](https://x.example/chart.png)\n\n> quoted\n\n---\n\n3. three\n4. ~~four~~")
    assert "img" not in out["tags"], "no image is fetched from where a reply points"
    assert out["hrefs"] == ["https://x.example/chart.png"] and out["text"].startswith("!a chart")
    assert {"blockquote", "hr", "ol", "s"} <= set(out["tags"]) and 'start="3"' in out["html"]


def test_an_unclosed_fence_renders_as_code_while_it_streams(render) -> None:
    out = render("Here:\n```js\nconst a = 1;")
    assert out["tags"] == ["p", "pre", "code"]
    assert out["text"].rstrip().endswith("const a = 1;")


#: A reply as the thread shows it: the page's own view, given a stored reply.
VIEW = """async (m) => {
  const { messageView } = await import('/static/view.js');
  const article = messageView(m, {siblings: [m], editing: false, busy: false});
  const body = article.querySelector('.body');
  const cursor = body.querySelector('.cursor');
  return {
    markers: [...body.querySelectorAll('button.cite-marker')].map((b) => b.textContent),
    blocks: [...body.querySelectorAll('.code-block .code-lang')].map((s) => s.textContent),
    cursorIn: cursor ? cursor.parentElement.tagName.toLowerCase() : null,
    cursorAfter: cursor?.previousSibling?.textContent ?? null,
  };
}"""


def test_citation_markers_become_buttons_outside_code_and_links(watched) -> None:
    citation = {"number": 1, "page": 2, "filename": "report.pdf", "document_id": "d", "text": "q"}
    content = "See [1] and [report.pdf p.2], not `[1]` nor [[1]](https://x.example/).\n\n```text\n[1]\n```"
    out = watched.evaluate(VIEW, {"id": "r", "role": "assistant", "status": "complete", "content": content, "citations": [citation]})
    assert out["markers"] == ["[1]", "[report.pdf p.2]"]
    assert out["blocks"] == ["text"], "a fenced block keeps its language and its copy button"


@pytest.mark.parametrize(
    ("content", "inside", "after"),
    [
        ("One.\n\nTwo **bold", "p", "Two **bold"),
        ("- a\n- b", "li", "b"),
        ("Code:\n```js\nlet x", "code", "let x"),
        ("| a |\n|---|\n| b |", "td", "b"),
    ],
)
def test_the_streaming_cursor_sits_at_the_end_of_the_last_block(watched, content: str, inside: str, after: str) -> None:
    out = watched.evaluate(VIEW, {"id": "r", "role": "assistant", "status": "streaming", "content": content})
    assert (out["cursorIn"], out["cursorAfter"]) == (inside, after)
