"""PNG charts of a ``report.Report`` (matplotlib, no display needed).

``series`` says what each chart plots (label → value, straight from the report), so the
numbers drawn can be checked against the replay file; ``draw`` writes the PNGs.
"""

from __future__ import annotations

from pathlib import Path

from tools.analysts.report import Report

TTFT = "ttft_by_model_cache.png"
SPEED = "tokens_per_s_by_model.png"
MIX = "routing_mix.png"
COST = "cost_per_1k_turns_by_pool.png"


def series(r: Report) -> dict[str, dict[str, dict[str, float]]]:
    """chart file → series name → bar label → value."""
    ttft_labels = [f"{row.model}\n{row.cache}" for row in r.ttft]
    return {
        TTFT: {q: dict(zip(ttft_labels, (getattr(row, q) for row in r.ttft))) for q in ("p50", "p95", "p99")},
        SPEED: {"p50": {row.model: row.p50 for row in r.tokens_per_s}, "mean": {row.model: row.mean for row in r.tokens_per_s}},
        MIX: {
            "share of turns": {
                **{f"{p} (placed)": r.placed[p] / r.turns for p in r.placed},
                "shed": r.shed_rate,
                "downgraded": r.downgrade_rate,
            }
            if r.turns
            else {}
        },
        COST: {"USD per 1,000 turns": dict(r.cost_per_1k_by_pool)},
    }


_TITLES = {
    TTFT: ("Time to first token by model and cache outcome", "milliseconds"),
    SPEED: ("Generation speed by model", "completion tokens / s"),
    MIX: ("Where turns went (share of all turns)", "share"),
    COST: ("Cost per 1,000 turns, by pool", "USD"),
}


def draw(r: Report, out_dir: Path) -> list[str]:
    """Write every chart under ``out_dir``; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    names = []
    for name, by_series in series(r).items():
        title, unit = _TITLES[name]
        labels = sorted({label for values in by_series.values() for label in values}, key=_order(by_series))
        fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(labels) + 2), 4.0), dpi=100)
        width = 0.8 / max(1, len(by_series))
        for i, (series_name, values) in enumerate(by_series.items()):
            xs = [j + (i - (len(by_series) - 1) / 2) * width for j in range(len(labels))]
            bars = ax.bar(xs, [values.get(label, 0.0) for label in labels], width, label=series_name)
            ax.bar_label(bars, fmt="%.3g", fontsize=7)
        ax.set_xticks(range(len(labels)), [label.rsplit("/", 1)[-1] for label in labels], fontsize=8)  # org/ prefix off
        ax.set_title(title)
        ax.set_ylabel(unit)
        if len(by_series) > 1:
            ax.legend()
        if not labels:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        fig.tight_layout()
        fig.savefig(out_dir / name)
        plt.close(fig)
        names.append(name)
    return names


def _order(by_series: dict[str, dict[str, float]]):  # type: ignore[no-untyped-def]
    first = [label for values in by_series.values() for label in values]
    return lambda label: first.index(label)
