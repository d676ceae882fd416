"""A deployment that asks for real ClamAV signatures does not start with the shipped test ones (EICAR only)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from documents.settings import DocumentSettings
from documents.worker import require_signatures
from parley.errors import ConfigError


def test_the_shipped_test_signatures_are_refused_where_real_ones_are_required() -> None:
    with pytest.raises(ConfigError, match="main or daily"):
        require_signatures(replace(DocumentSettings(), real_signatures=True))


def test_freshclams_databases_are_accepted(tmp_path: Path) -> None:
    (tmp_path / "main.cvd").write_bytes(b"x")
    (tmp_path / "daily.cld").write_bytes(b"x")  # patched by freshclam: .cld
    require_signatures(replace(DocumentSettings(), real_signatures=True, clamav_db=str(tmp_path)))


def test_one_database_missing_is_named(tmp_path: Path) -> None:
    (tmp_path / "main.cvd").write_bytes(b"x")
    with pytest.raises(ConfigError, match="no daily database"):
        require_signatures(replace(DocumentSettings(), real_signatures=True, clamav_db=str(tmp_path)))


def test_local_runs_and_scanning_off_need_none() -> None:
    require_signatures(DocumentSettings())  # make run: the shipped signatures
    require_signatures(replace(DocumentSettings(), real_signatures=True, clamscan=""))
