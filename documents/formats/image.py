"""PNG and JPEG: one page, read by OCR."""

from __future__ import annotations

import io

from documents.extract import Page, page_index
from documents.formats.ocr import read as read_image


class ImageDocument:
    page_count = 1

    def __init__(self, data: bytes) -> None:
        from PIL import Image

        self._image = Image.open(io.BytesIO(data))
        self._image.load()

    def page(self, number: int, *, ocr: bool = True, dpi: int = 200, languages: str = "eng") -> Page:
        page_index(number, 1)
        if not ocr:
            return Page(number, (), "empty")
        blocks = read_image(self._image, languages)
        return Page(number, blocks, "ocr" if blocks else "empty")

    def close(self) -> None:
        self._image.close()
