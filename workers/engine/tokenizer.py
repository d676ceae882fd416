"""Tokenizers the engine's backends count and decode with.

``ByteTokenizer`` is built on the spot for the untrained random model (nothing
is downloaded): one token per UTF-8 byte plus BOS/EOS/PAD. ``HFTokenizer`` wraps
the tokenizer of a local HuggingFace model directory; ``JsonTokenizer`` reads the
same directory's ``tokenizer.json`` with the ``tokenizers`` library alone, for
processes that only count (``local_tokenizer`` picks). ``WordTokenizer`` is the
synthetic backend's: words and punctuation, ids from a stable hash.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol


class Tokenizer(Protocol):
    vocab_size: int
    eos_ids: frozenset[int]

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes are tokens 0..255; 256..258 are BOS, EOS and PAD."""

    BOS, EOS, PAD = 256, 257, 258
    SPECIAL = {BOS: "<s>", EOS: "</s>", PAD: "<pad>"}

    def __init__(self) -> None:
        self.vocab_size = 259
        self.eos_ids = frozenset({self.EOS})

    def encode(self, text: str) -> list[int]:
        return [self.BOS, *text.encode("utf-8")]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True) -> str:
        """Special tokens are skipped, as SGLang does by default, or written by name; there are no added
        tokens, so spaces_between_special_tokens has nothing to separate (as with HF's fast tokenizers)."""
        if skip_special_tokens:
            return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            if i < 256:
                run.append(i)
                continue
            out.append(bytes(run).decode("utf-8", errors="replace"))
            run = []
            out.append(self.SPECIAL[i])
        out.append(bytes(run).decode("utf-8", errors="replace"))
        return "".join(out)


class HFTokenizer:
    """The tokenizer of a local HuggingFace model directory (no hub access)."""

    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        self.hf = self._tok  # what llguidance reads the vocabulary from (grammar.py)
        self.vocab_size = len(self._tok)
        eos = self._tok.eos_token_id
        self.eos_ids = frozenset() if eos is None else frozenset({int(eos)})
        self.pad_id = int(self._tok.pad_token_id if self._tok.pad_token_id is not None else (eos or 0))

    def add_eos(self, ids: Sequence[int]) -> None:
        """Models list more end tokens in generation_config.json than the tokenizer knows."""
        self.eos_ids = self.eos_ids | frozenset(int(i) for i in ids)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True) -> str:
        """As SGLang's detokenizer calls it: both flags go to the tokenizer (fast tokenizers ignore the second)."""
        return str(
            self._tok.decode(
                list(ids), skip_special_tokens=skip_special_tokens, spaces_between_special_tokens=spaces_between_special_tokens
            )
        )


class JsonTokenizer:
    """A local model directory's ``tokenizer.json`` through the ``tokenizers`` library: the ids transformers'
    fast tokenizer gives for it, without importing transformers and torch, which costs a counting process
    (the context builder) seconds at every start."""

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer as Rust

        self._tok = Rust.from_file(str(model_dir / "tokenizer.json"))
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        config = _tokenizer_config(model_dir)
        eos = self._tok.token_to_id(_token_text(config.get("eos_token")) or "")
        self.eos_ids: frozenset[int] = frozenset() if eos is None else frozenset({eos})

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens))


def local_tokenizer(model_dir: Path) -> Tokenizer:
    """``JsonTokenizer`` where it encodes as transformers would, else ``HFTokenizer``.

    transformers rebuilds a tokenizer's post-processor when ``tokenizer_config.json`` sets
    ``add_bos_token``/``add_eos_token`` (Llama-style tokenizers), and needs its own code where there is no
    ``tokenizer.json``; there the plain file would count differently from the engine, so transformers loads it.
    """
    config = _tokenizer_config(model_dir)
    if (model_dir / "tokenizer.json").is_file() and not {"add_bos_token", "add_eos_token"} & set(config):
        return JsonTokenizer(model_dir)
    return HFTokenizer(model_dir)


def _tokenizer_config(model_dir: Path) -> dict:
    path = model_dir / "tokenizer_config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _token_text(token: object) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's ``{"content": …}``."""
    if isinstance(token, dict):
        return token.get("content")
    return token if isinstance(token, str) else None


_WORD = re.compile(r"\s*[A-Za-z0-9]+|\s*[^\sA-Za-z0-9]|\s+")


class WordTokenizer:
    """Words (with their leading space) and single punctuation marks, about 1.3 per English word."""

    def __init__(self) -> None:
        self.vocab_size = 1 << 20
        self.eos_ids: frozenset[int] = frozenset()

    def pieces(self, text: str) -> list[str]:
        return _WORD.findall(text)

    def encode(self, text: str) -> list[int]:
        return [self.piece_id(p) for p in self.pieces(text)]

    @staticmethod
    def piece_id(piece: str) -> int:
        return zlib.crc32(piece.encode("utf-8")) % (1 << 20)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True) -> str:
        raise NotImplementedError("the synthetic backend keeps its text; ids are only counted")
