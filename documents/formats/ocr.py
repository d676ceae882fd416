"""Text from an image with tesseract: paragraphs as tesseract groups them, headings by line height.

Runs the ``tesseract`` command (Debian's tesseract-ocr) with the image on stdin
and TSV on stdout, one thread (``OMP_THREAD_LIMIT=1``): on a shared CPU, parallel
OCR of one page only steals time from chat, and pages already run one per child.
"""

from __future__ import annotations

import io
import os
import statistics
import subprocess
from typing import TYPE_CHECKING

from documents.extract import Block

if TYPE_CHECKING:
    from PIL.Image import Image

TESSERACT = "tesseract"

#: Most pixels an image is read at; larger ones are scaled down (a 300 dpi A3 page is ~17 M).
MAX_PIXELS = 25_000_000

#: A line this much taller than the page's median word is a heading.
_HEADING_RATIO = 1.3


def read(image: Image, languages: str = "eng") -> tuple[Block, ...]:
    """The blocks tesseract finds in ``image``, in reading order."""
    image = _bounded(image.convert("L"))
    encoded = io.BytesIO()
    image.save(encoded, "PPM")  # uncompressed: encoding PNG would cost more than it saves on a pipe
    done = subprocess.run(
        [TESSERACT, "stdin", "stdout", "-l", languages, "--psm", "3", "tsv"],
        input=encoded.getvalue(),
        capture_output=True,
        env={**os.environ, "OMP_THREAD_LIMIT": "1"},
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tesseract failed (exit {done.returncode}): {done.stderr.decode(errors='replace')[:200]}")
    return _blocks(done.stdout.decode("utf-8", errors="replace"))


def _bounded(image: Image) -> Image:
    pixels = image.width * image.height
    if pixels <= MAX_PIXELS:
        return image
    scale = (MAX_PIXELS / pixels) ** 0.5
    return image.resize((max(1, int(image.width * scale)), max(1, int(image.height * scale))))


def _blocks(tsv: str) -> tuple[Block, ...]:
    """Paragraphs from tesseract's TSV (level 5 rows are words, keyed by block, paragraph and line)."""
    paragraphs: dict[tuple[int, int], dict[int, list[tuple[str, int]]]] = {}
    for row in tsv.splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) < 12 or cells[0] != "5" or not cells[11].strip() or float(cells[10]) < 0:
            continue
        block, paragraph, line, height = int(cells[2]), int(cells[3]), int(cells[4]), int(cells[9])
        paragraphs.setdefault((block, paragraph), {}).setdefault(line, []).append((cells[11].strip(), height))
    if not paragraphs:
        return ()
    # The body's height is the median word's: most words are body text, however few lines headings take.
    body = statistics.median(h for lines in paragraphs.values() for words in lines.values() for _, h in words)
    out = []
    for lines in paragraphs.values():
        text = " ".join(" ".join(w for w, _ in words) for words in lines.values())
        tall = all(statistics.median(h for _, h in words) >= body * _HEADING_RATIO for words in lines.values())
        out.append(Block("heading" if tall and len(lines) <= 2 else "paragraph", text))
    return tuple(out)
