"""Where the cold tier lies: a local directory, or any fsspec URL (``s3://bucket/parley``…).

Only what the archive needs: list files under a folder, write a file whole (it
appears only once complete), read one. fsspec is imported when a URL asks for
it, so a local archive needs nothing beyond the base install.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import IO, Any

from parley.errors import ConfigError


class Location:
    """A root folder; every path below is relative to it, with ``/`` separators."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._fs: Any = None
        self._local: Path | None = None
        scheme = url.split("://", 1)[0] if "://" in url else ""
        if scheme in ("", "file"):
            self._local = Path(url.split("://", 1)[-1]).expanduser()
        else:
            try:
                import fsspec  # type: ignore[import-untyped]
            except ImportError as exc:
                raise ConfigError(
                    f"archive location {url!r} needs the fsspec package (pip install 'parley[archive]'; "
                    f"{scheme}:// may need its own, e.g. s3fs); a local directory needs neither"
                ) from exc
            try:
                self._fs, self._root = fsspec.core.url_to_fs(url)
            except (ImportError, ValueError) as exc:
                raise ConfigError(f"archive location {url!r}: {exc}") from exc

    def files(self, folder: str) -> list[str]:
        """Relative paths of every file under ``folder`` (recursively), sorted."""
        if self._local is not None:
            base = self._local / folder
            if not base.is_dir():
                return []
            return sorted(str(p.relative_to(self._local)).replace(os.sep, "/") for p in base.rglob("*") if p.is_file())
        base = f"{self._root}/{folder}"
        if not self._fs.exists(base):
            return []
        return sorted(p[len(self._root) + 1 :] for p in self._fs.find(base))

    def write(self, path: str, data: bytes) -> None:
        """Write a whole file: readers never see half of one (a temporary name, then a rename)."""
        if self._local is not None:
            target = self._local / path
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)
            return
        # Object stores write an object whole on close; no rename needed.
        with self._fs.open(f"{self._root}/{path}", "wb") as f:
            f.write(data)

    def open(self, path: str) -> IO[bytes]:
        if self._local is not None:
            return open(self._local / path, "rb")
        return self._fs.open(f"{self._root}/{path}", "rb")  # type: ignore[no-any-return]
