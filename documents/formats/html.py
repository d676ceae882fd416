"""HTML: the main content (``<main>``, else ``<article>``, else ``<body>``) as headings, paragraphs and tables.

Read with lxml rather than trafilatura: trafilatura is tuned for news articles
and drops short pages and tables unpredictably, while a user's uploaded page
is usually all content. Scripts, styles, navigation, footers, asides, forms and
embedded frames are dropped; nothing is fetched or executed.
"""

from __future__ import annotations

from documents.extract import Block, markdown_table

_DROP = ("script", "style", "noscript", "template", "nav", "footer", "aside", "form", "iframe", "svg", "button", "select")
_HEADINGS = {f"h{i}" for i in range(1, 7)}
_CONTAINERS = {
    "html", "body", "main", "article", "section", "div", "header", "ul", "ol", "dl", "figure", "center", "details",
    "fieldset", "hgroup", "hr", "thead", "tbody",
}
_PARAGRAPHS = {"p", "li", "blockquote", "pre", "dt", "dd", "figcaption", "caption", "address"}


def segments(data: bytes) -> list[list[Block]]:
    import lxml.html

    parser = lxml.html.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True)
    root = lxml.html.document_fromstring(data, parser=parser)
    for element in list(root.iter(*_DROP)):
        element.drop_tree()
    main = next(root.iter("main"), None)
    main = main if main is not None else next(root.iter("article"), None)
    main = main if main is not None else root
    blocks: list[Block] = []
    pending: list[str] = []
    _walk(main, blocks, pending)
    _flush(blocks, pending)
    return [blocks]


def _walk(element, blocks: list[Block], pending: list[str]) -> None:
    """Block elements become blocks; loose inline text between them gathers into paragraphs."""
    if element.text and element.text.strip():
        pending.append(element.text)
    for child in element:
        tag = child.tag.lower() if isinstance(child.tag, str) else ""
        if tag in _HEADINGS or tag in _PARAGRAPHS:
            _flush(blocks, pending)
            text = child.text_content().strip() if tag == "pre" else _text(child)
            if text:
                blocks.append(Block("heading" if tag in _HEADINGS else "paragraph", text))
        elif tag == "table":
            _flush(blocks, pending)
            rows = [[_text(cell) for cell in row.iter("th", "td")] for row in child.iter("tr")]
            rows = [r for r in rows if any(r)]
            if rows:
                blocks.append(Block("table", markdown_table(rows)))
        elif tag in _CONTAINERS:
            _flush(blocks, pending)
            _walk(child, blocks, pending)
            _flush(blocks, pending)
        elif tag:
            pending.append(child.text_content())
        if child.tail and child.tail.strip():
            pending.append(child.tail)


def _flush(blocks: list[Block], pending: list[str]) -> None:
    text = " ".join(" ".join(pending).split())
    pending.clear()
    if text:
        blocks.append(Block("paragraph", text))


def _text(element) -> str:
    return " ".join(element.text_content().split())
