"""Where uploaded originals are kept: a local directory by default, any fsspec URL by setting.

The store is content-blind: a blob is named by its document id, written once
at upload (atomically: a reader never sees half a file) and deleted with the
document. The URI it returns is what ``DocumentUploaded.storage_uri`` records,
so the document worker reads the original from wherever the gateway put it.
Calls block (file or network I/O): async callers run them in a thread.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

from schemas import sealing


def original_at(document_id: str) -> str:
    """The place an original is sealed for (``schemas.sealing``): bound to its document, so a blob copied
    over another document's of the same owner does not open."""
    return sealing.cell_at("blobs", "original", document_id)


class BlobStore(Protocol):
    def put(self, name: str, data: bytes) -> str:
        """Store ``data`` under ``name``; the URI to read it back from."""
        ...

    def get(self, uri: str) -> bytes: ...

    def delete(self, uri: str) -> None:
        """Remove it; a blob already gone is not an error."""
        ...

    def uri_of(self, name: str) -> str:
        """The URI ``put(name, …)`` returns."""
        ...


class LocalBlobs:
    """A directory on this machine (``make run``: ``.data/documents``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, uri: str) -> Path:
        path = Path(urlparse(uri).path if uri.startswith("file://") else uri).resolve()
        if self.root.resolve() not in path.parents:
            raise ValueError("the blob is not in this store")  # a URI from an event must not reach elsewhere
        return path

    def put(self, name: str, data: bytes) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        target = self.root / name
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".upload-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return self.uri_of(name)

    def uri_of(self, name: str) -> str:
        return (self.root / name).resolve().as_uri()

    def get(self, uri: str) -> bytes:
        return self._path(uri).read_bytes()

    def delete(self, uri: str) -> None:
        self._path(uri).unlink(missing_ok=True)


class FsspecBlobs:
    """Any fsspec filesystem (``s3://bucket/prefix`` with s3fs installed, ``gs://``, ``memory://``…)."""

    def __init__(self, url: str) -> None:
        import fsspec

        self.url = url.rstrip("/")
        self.fs, self.prefix = fsspec.core.url_to_fs(self.url)

    def put(self, name: str, data: bytes) -> str:
        path = f"{self.prefix}/{name}"
        with self.fs.open(path, "wb") as f:  # object stores write an object whole on close
            f.write(data)
        return self.uri_of(name)

    def uri_of(self, name: str) -> str:
        return f"{self.url}/{name}"

    def get(self, uri: str) -> bytes:
        with self.fs.open(self._path(uri), "rb") as f:
            return f.read()

    def delete(self, uri: str) -> None:
        path = self._path(uri)
        if self.fs.exists(path):
            self.fs.rm(path)

    def _path(self, uri: str) -> str:
        if not uri.startswith(self.url + "/"):
            raise ValueError("the blob is not in this store")
        return f"{self.prefix}/{uri[len(self.url) + 1:]}"


def blob_store(url: str) -> BlobStore:
    """The store ``PARLEY_DOCUMENTS_BLOB_URL`` names: a path (or file:// URL) is a local directory."""
    if "://" not in url:
        return LocalBlobs(Path(url))
    if url.startswith("file://"):
        return LocalBlobs(Path(urlparse(url).path))
    return FsspecBlobs(url)
