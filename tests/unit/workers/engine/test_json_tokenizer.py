"""``local_tokenizer``: the plain tokenizer.json where it encodes as transformers would, transformers where not.

The packaged model's counts against transformers' own are in tests/integration/test_engine_packaged_model.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from workers.engine import tokenizer as tk


def model_dir(tmp_path: Path, config: dict) -> Path:
    vocab = {"[UNK]": 0, "<eos>": 1, "hello": 2, "world": 3}
    rust = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    rust.pre_tokenizer = pre_tokenizers.Whitespace()
    rust.add_special_tokens(["<eos>"])
    rust.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def test_the_plain_file_encodes_decodes_and_knows_its_end_token(tmp_path: Path) -> None:
    tok = tk.local_tokenizer(model_dir(tmp_path, {"eos_token": {"content": "<eos>"}}))
    assert isinstance(tok, tk.JsonTokenizer)
    assert tok.encode("hello world nope") == [2, 3, 0]
    assert tok.eos_ids == frozenset({1}) and tok.vocab_size == 4
    assert tok.decode([2, 1, 3]) == "hello world"


@pytest.mark.parametrize("key", ["add_bos_token", "add_eos_token"])
def test_a_config_that_makes_transformers_rebuild_the_post_processor_loads_through_transformers(
    tmp_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded: list[Path] = []
    monkeypatch.setattr(tk, "HFTokenizer", lambda path: loaded.append(path) or "transformers")
    assert tk.local_tokenizer(model_dir(tmp_path, {key: True})) == "transformers"
    assert loaded == [tmp_path]


def test_a_directory_without_tokenizer_json_loads_through_transformers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tk, "HFTokenizer", lambda path: "transformers")
    assert tk.local_tokenizer(tmp_path) == "transformers"
