"""Moderation quality and cost of the local classifier, each figure next to a baseline of the same run.

The labelled set is bench/moderation_set.py (clean turns, tricky negatives and
positives of every category; how it was made is written there), split in two
halves by position: rules may be tuned on dev, test is the figure to quote.

Reported side by side:

- quality: precision and recall per category (a sub-category's parent counts
  as labelled: moderation_set.Example.labels) and overall (flagged at all vs
  clean), for ``LocalClassifier`` at the default policy (every category at
  0.5), and for the SVM alone (its probability as harassment at 0.5: what
  alt-profanity-check gives without Parley's rules) as the baseline; the
  tricky negatives' false-positive rate, and every miss and false alarm of
  the test half, by rule, to read;
- cost: checks/s of ``LocalClassifier.scores`` against a bare pass over the
  same texts (``str.lower`` and one regular expression), in one process.

Run: `python -m bench.moderation`. No Kafka or Cassandra.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence

from bench.moderation_set import EXAMPLES, Example, half
from moderation import rules
from moderation.categories import CATEGORIES
from moderation.classifier import Scores
from moderation.local import LocalClassifier, ProfanitySvm
from moderation.policy import TierPolicy

Flagger = Callable[[str], frozenset[str]]


def _ratio(hit: int, total: int) -> str:
    return f"{hit / total:.2f}" if total else "  - "


def table(examples: Sequence[Example], flag: Flagger) -> tuple[list[str], dict[str, float]]:
    """Lines of a precision / recall table over ``examples``, and its overall figures."""
    flagged = [flag(e.text) for e in examples]
    lines = [f"{'category':<24} {'n':>3} {'prec':>5} {'recall':>6}"]
    for c in CATEGORIES:
        positives = sum(c in e.labels() for e in examples)
        said = sum(c in f for f in flagged)
        right = sum(c in f and c in e.labels() for e, f in zip(examples, flagged))
        lines.append(f"{c:<24} {positives:>3} {_ratio(right, said):>5} {_ratio(right, positives):>6}")
    bad = [bool(e.flagged) for e in examples]
    said = [bool(f) for f in flagged]
    tp = sum(b and s for b, s in zip(bad, said))
    tricky = [f for e, f in zip(examples, flagged) if e.kind == "tricky"]
    overall = {
        "precision": tp / max(1, sum(said)),
        "recall": tp / max(1, sum(bad)),
        "tricky_false_positive_rate": sum(bool(f) for f in tricky) / max(1, len(tricky)),
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

    halves = {name: [e for i, e in enumerate(EXAMPLES) if half(i) == name] for name in ("dev", "test")}
    halves["all"] = list(EXAMPLES)
    report: dict = {"model": classifier.model, "examples": len(EXAMPLES)}
    for name, examples in halves.items():
        for method, flag in (("local", local), ("svm_alone", svm_alone)):
            lines, overall = table(examples, flag)
            report[f"{name}/{method}"] = {"table": lines, **overall}
    report["test_errors"] = [
        f"{'miss' if e.labels() - got else 'false'}: {e.text!r} labelled {sorted(e.labels())} got {sorted(got)}"
        f" rules {rules.matched(rules.neutralise(e.text))}"
        for e in halves["test"]
        if (got := local(e.text)) != e.labels()
    ]
    return report


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
    print(f"labelled set: {report['examples']} texts; classifier {report['model']}; default policy (0.5)")
    for name in ("test", "dev", "all"):
        for method in ("local", "svm_alone"):
            print(f"\n-- {name} half, {method}" if name != "all" else f"\n-- whole set, {method}")
            print("\n".join(report[f"{name}/{method}"]["table"]))
    print("\n-- test half, local: misses and false alarms")
    print("\n".join(report["test_errors"]) or "(none)")
    cost = throughput()
    print(
        f"\nchecks/s: local {cost['local_checks_per_s']:,.0f}, bare lower+regex {cost['baseline_checks_per_s']:,.0f}"
        f" (ratio {cost['ratio']:.3f})"
    )


if __name__ == "__main__":
    main()
