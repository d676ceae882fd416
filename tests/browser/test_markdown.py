"""The reply renderer in the browser: what a model (or an attacker) writes can never become markup."""

from __future__ import annotations

from typing import Any

import pytest

RENDER = """async (source) => {
  const { renderMarkdown } = await import('/static/markdown.js');
  const host = document.createElement('div');
  host.innerHTML = renderMarkdown(source);
  const all = [...host.querySelectorAll('*')];
  return {
    html: host.innerHTML,
    text: host.textContent,
    tags: all.map((e) => e.tagName.toLowerCase()),
    handlers: all.flatMap((e) => [...e.attributes].map((a) => a.name)).filter((n) => n.startsWith('on')),
    hrefs: [...host.querySelectorAll('a')].map((a) => a.getAttribute('href')),
  };
}"""


@pytest.fixture
def render(page, web_stack) -> Any:
    page.goto(web_stack.url + "/")
    return lambda source: page.evaluate(RENDER, source)


@pytest.mark.parametrize(
    "attack",
    [
        "<img src=x onerror=alert(1)>",
        "<script>alert(1)</script>",
        "[click](javascript:alert(1))",
        '[click](https://x.example/" onmouseover="alert(1))',
        "```\n</code></pre><img src=x onerror=alert(1)>\n```",
        "`<iframe src=//x>`",
        "**<svg onload=alert(1)>**",
    ],
)
def test_untrusted_text_never_becomes_markup(render, attack: str) -> None:
    out = render(attack)
    assert set(out["tags"]) <= {"p", "a", "code", "pre", "strong", "em", "br"}, out["html"]
    assert not out["handlers"], out["html"]
    assert all(h.startswith(("http://", "https://")) for h in out["hrefs"]), out["hrefs"]
    assert "<" not in attack or "<" in out["text"], "the angle brackets are shown as text"


def test_the_markdown_subset(render) -> None:
    out = render("Use **bold**, *it*, `x < y` and [docs](https://example.com/a_b).\n\n- one\n- two\n\n```py\nprint('<b>')\n```")
    assert out["tags"] == ["p", "strong", "em", "code", "a", "ul", "li", "li", "pre", "code"]
    assert out["hrefs"] == ["https://example.com/a_b"]
    assert "print('<b>')" in out["text"] and "x < y" in out["text"]


def test_an_unclosed_fence_renders_as_code_while_it_streams(render) -> None:
    out = render("Here:\n```js\nconst a = 1;")
    assert out["tags"] == ["p", "pre", "code"]
    assert out["text"].endswith("const a = 1;")
