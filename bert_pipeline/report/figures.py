"""The report's figures as PNG bytes, drawn offline with matplotlib's Agg canvas (no pyplot, no display, no network).

Each ``*_png`` function takes plain rows (parsed CSV or the evaluate stage's tables) and returns the bytes of one
PNG; :func:`family_figures` builds the report's set (:class:`ReportFigure`: file name, caption, the file the data
came from, bytes). Nothing here writes a file.

Determinism: the figure size and dpi are fixed per kind (:data:`WIDTH_IN`, :data:`DPI`), colours come from a fixed
palette, fonts are matplotlib's bundled DejaVu Sans, and :data:`PNG_METADATA` drops the ``Software`` text chunk the
PNG writer would otherwise embed (Agg writes no creation time), so the same rows give byte-identical PNG files
with the same matplotlib and FreeType. The score-vs-speed figure plots wall-clock speed: its bytes change when the
measured speed does, like the report table beside it.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_pipeline.errors import PipelineError

DPI = 100
"""Dots per inch of every figure: ``WIDTH_IN * DPI`` = 900 pixels wide."""
WIDTH_IN = 9.0
"""Width of every figure in inches."""
PNG_METADATA: dict[str, str | None] = {"Software": None}
"""``savefig(metadata=...)`` for PNG: None removes matplotlib's ``Software`` entry (a version string)."""
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
"""Matplotlib's tab10 colours, one per family member in table order."""
RC = {"font.family": "DejaVu Sans", "font.size": 9.0, "axes.grid": True, "grid.alpha": 0.3,
      "path.simplify": False}
"""Style every figure is drawn with (set per figure, so a user's matplotlibrc does not change the bytes)."""


@dataclass(frozen=True)
class ReportFigure:
    """One figure of the report.

    Attributes:
        name: file name inside the figures folder, e.g. ``pretrain_curves.png``.
        caption: a short sentence shown under the image.
        source: the file(s) the plotted numbers come from (repository-relative), cited in the caption.
        png: the PNG file's bytes.
    """

    name: str
    caption: str
    source: str
    png: bytes


def to_png(fig: Any) -> bytes:
    """The PNG bytes of a matplotlib ``Figure`` through the Agg canvas, at :data:`DPI`, without the ``Software``
    metadata (byte-identical for the same drawing)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata=PNG_METADATA)
    return buf.getvalue()


def _figure(height_in: float, draw) -> bytes:
    """Draw with ``draw(fig)`` on a new ``WIDTH_IN`` x ``height_in`` inch figure under :data:`RC`; its PNG bytes."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI, layout="constrained")
        draw(fig)
        return to_png(fig)


def number(cell: Any) -> float | None:
    """A CSV cell as a float; None for an empty cell, text that is not a number, or NaN."""
    if cell is None or cell == "":
        return None
    try:
        value = float(cell)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def read_csv_rows(path: Path, required: Sequence[str]) -> list[dict[str, str]] | None:
    """The rows of a CSV file as dicts; None when the file does not exist.

    Raises:
        PipelineError: a column of ``required`` is missing from the header (one line naming the file).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise PipelineError(f"{path}: missing column(s) {', '.join(missing)} (expected a header with "
                            f"{', '.join(required)}; rerun the stage that writes it)")
    return list(reader)


def _series(rows: Sequence[Mapping[str, Any]], x: str, y: str, scale: float = 1.0) -> tuple[list[float], list[float]]:
    """The ``(x, y * scale)`` points of the rows where both cells are numbers."""
    xs, ys = [], []
    for row in rows:
        a, b = number(row.get(x)), number(row.get(y))
        if a is not None and b is not None:
            xs.append(a)
            ys.append(b * scale)
    return xs, ys


def training_curves_png(rows: Sequence[Mapping[str, Any]], title: str) -> bytes:
    """Three panels by optimizer step: train loss, held-out MLM loss, held-out MLM accuracy (%).

    ``rows``: a training history as the pre-training and distillation history CSVs hold it (columns ``step``,
    ``train_loss``, ``eval_mlm_loss``, ``eval_mlm_accuracy`` as fractions, optionally ``eval_unigram_accuracy``,
    drawn dashed as the always-the-most-frequent-token baseline); empty cells are skipped. A panel whose column has
    no number says "no evaluation" instead of a line.
    """

    def draw(fig):
        axes = fig.subplots(1, 3)
        panels = (("train_loss", "train loss", 1.0), ("eval_mlm_loss", "held-out MLM loss", 1.0),
                  ("eval_mlm_accuracy", "held-out MLM accuracy (%)", 100.0))
        for ax, (column, label, scale) in zip(axes, panels, strict=True):
            xs, ys = _series(rows, "step", column, scale)
            if xs:
                ax.plot(xs, ys, color=PALETTE[0], marker="o" if len(xs) < 30 else None, markersize=3,
                        linewidth=1.2, label=label.split(" (")[0])
            else:
                ax.text(0.5, 0.5, "no evaluation", ha="center", va="center", transform=ax.transAxes)
            if column == "eval_mlm_accuracy":
                bx, by = _series(rows, "step", "eval_unigram_accuracy", scale)
                if bx:
                    ax.plot(bx, by, color=PALETTE[7], linestyle="--", linewidth=1.0, label="most frequent token")
                    ax.legend(loc="best", fontsize=7)
            ax.set_xlabel("step")
            ax.set_title(label)
        fig.suptitle(title)

    return _figure(3.2, draw)


def budget_curve_png(record: Mapping[str, Any]) -> bytes:
    """Pre-training gain (points, pre-trained minus from scratch) against tokens seen (millions), a line per score
    with each gain's interval as error bars (its ``ci_low``/``ci_high``: the paired bootstrap over test examples, and
    seeds where there are several); a record from before the intervals gets the seeds' range instead, and the axis
    says which. The dashed line is no gain. ``record``: the budget curve's quality record
    (:func:`bert_pipeline.report.budget_curve.curve_record`)."""
    points = record.get("points", [])
    keys = sorted({k for p in points for k in p["gain"]})
    gains = [p["gain"][k] for p in points for k in p["gain"]]
    intervals = bool(gains) and all("ci_low" in g and "ci_high" in g for g in gains)
    low_key, high_key = ("ci_low", "ci_high") if intervals else ("min", "max")
    settings = record.get("intervals") or {}
    bars = (f"{100 * settings['confidence']:g}% interval" if settings else "interval") if intervals else "seeds' range"

    def draw(fig):
        ax = fig.subplots()
        for i, key in enumerate(keys):
            rows = [p for p in points if key in p["gain"]]
            xs = [p["tokens_seen"] / 1e6 for p in rows]
            mean = [100 * p["gain"][key]["mean"] for p in rows]
            # a percentile interval need not hold its point: a bar never reaches past it the wrong way
            low = [max(0.0, m - 100 * p["gain"][key][low_key]) for m, p in zip(mean, rows, strict=True)]
            high = [max(0.0, 100 * p["gain"][key][high_key] - m) for m, p in zip(mean, rows, strict=True)]
            ax.errorbar(xs, mean, yerr=[low, high], color=PALETTE[i % len(PALETTE)], marker="o", markersize=4,
                        linewidth=1.2, capsize=3, label=key.replace("@", " @"))
        ax.axhline(0.0, color=PALETTE[7], linewidth=0.8, linestyle="--")
        ax.set_xlabel("pre-training tokens seen (millions)")
        ax.set_ylabel("gain over from scratch (test points)")
        ax.set_title(f"Pre-training budget curve (bars: {bars})")
        if keys:
            ax.legend(loc="best", fontsize=7)

    return _figure(4.0, draw)


def score_vs_speed_png(rows: Sequence[Sequence[Any]], reference: str | None = None) -> bytes:
    """Average test score (points) against relative speed, one labelled point per family member.

    ``rows``: ``[model, average points, relative speed, latency, throughput, average interval low, high]`` as
    the evaluate stage's ``score_vs_speed.csv`` (an empty average means a task is missing: the member is left out;
    the interval, in points, draws an error bar where it is given). Relative speed is the reference member's batch-1
    latency over the member's (wall clock: the figure changes with the measured speed). ``reference`` names the
    1.0x member in the axis label.
    """

    def draw(fig):
        ax = fig.subplots()
        drawn = 0
        for i, row in enumerate(rows):
            score, speed = number(row[1]), number(row[2])
            if score is None or speed is None:
                continue
            ax.scatter([speed], [score], s=40, color=PALETTE[i % len(PALETTE)], zorder=3)
            low, high = (number(row[5]), number(row[6])) if len(row) > 6 else (None, None)
            if low is not None and high is not None:
                ax.errorbar([speed], [score], yerr=[[score - low], [high - score]], color=PALETTE[i % len(PALETTE)],
                            capsize=3, linewidth=1, zorder=2)
            ax.annotate(str(row[0]), (speed, score), textcoords="offset points", xytext=(6, 4))
            drawn += 1
        if not drawn:
            ax.text(0.5, 0.5, "no member with every task and a speed", ha="center", va="center",
                    transform=ax.transAxes)
        ax.axvline(1.0, color=PALETTE[7], linewidth=0.8, linestyle=":")
        ax.set_xlabel("relative speed (batch 1" + (f", {reference} = 1.0x" if reference else "") + ")")
        ax.set_ylabel("average test score (points)")
        ax.set_title("Score vs speed")
        ax.margins(0.2)

    return _figure(4.5, draw)


def confusion_counts(pairs: Sequence[Sequence[str]], labels: Sequence[str]) -> list[list[int]]:
    """``counts[i][j]``: examples of actual ``labels[i]`` predicted as ``labels[j]``.

    Raises:
        ValueError: a pair names a label not in ``labels``.
    """
    where = {label: i for i, label in enumerate(labels)}
    counts = [[0] * len(labels) for _ in labels]
    for actual, predicted in pairs:
        counts[where[actual]][where[predicted]] += 1
    return counts


def confusion_png(confusion: Mapping[str, Sequence[Sequence[str]]], labels: Sequence[str] | None = None) -> bytes:
    """One confusion-matrix panel per model (rows actual, columns predicted, cells counted), four per row.

    ``confusion``: model -> ``[actual, predicted]`` label names per test example (the evaluate stage's pairs), in
    table order; ``labels``: the axis order (default: every label seen, sorted).
    """
    models = list(confusion)
    labels = list(labels) if labels is not None else sorted({x for p in confusion.values() for pair in p for x in pair})
    cols = max(1, min(4, len(models)))
    nrows = max(1, math.ceil(len(models) / cols))

    def draw(fig):
        axes = fig.subplots(nrows, cols, squeeze=False)
        for k, ax in enumerate(axes.flat):
            if k >= len(models):
                ax.set_axis_off()
                continue
            counts = confusion_counts(confusion[models[k]], labels)
            total = sum(map(sum, counts))
            ax.imshow(counts, cmap="Blues", vmin=0, vmax=max(1, max(map(max, counts), default=1)))
            ax.grid(False)
            peak = max(map(max, counts), default=0)
            for i, row in enumerate(counts):
                for j, n in enumerate(row):
                    ax.text(j, i, str(n), ha="center", va="center", color="white" if n > peak / 2 else "black")
            ax.set_xticks(range(len(labels)), labels)
            ax.set_yticks(range(len(labels)), labels)
            ax.set_xlabel("predicted")
            ax.set_ylabel("actual")
            correct = sum(counts[i][i] for i in range(len(labels)))
            ax.set_title(f"{models[k]}\n{correct} of {total} right", fontsize=9)
        fig.suptitle("Sentiment confusion matrix (test examples)")

    return _figure(2.4 * nrows + 0.4, draw)


def ner_per_type_png(rows: Sequence[Sequence[Any]]) -> bytes:
    """Horizontal bars of NER test F1 (points, agreement with spaCy's silver labels) per entity type, one bar per
    model in each type's group, its value written at the bar's end (``–`` when the model has no score for the type).

    ``rows``: ``[model, type, f1 points, label, f1 interval low, high]`` as the evaluate stage's
    ``ner_f1_per_type.csv`` (the interval, in points, draws an error bar where it is given); models keep their
    first-seen order, types are sorted.
    """
    models = list(dict.fromkeys(str(r[0]) for r in rows))
    types = sorted({str(r[1]) for r in rows})
    value = {(str(r[0]), str(r[1])): number(r[2]) for r in rows}
    bounds = {(str(r[0]), str(r[1])): (number(r[4]), number(r[5])) for r in rows if len(r) > 5}

    def draw(fig):
        ax = fig.subplots()
        height = 0.8 / max(1, len(models))
        for i, m in enumerate(models):
            ys = [t_i + (i - (len(models) - 1) / 2) * height for t_i in range(len(types))]
            widths = [value.get((m, t)) or 0.0 for t in types]
            err = [[max(w - (bounds.get((m, t), (None, None))[0] or w), 0.0) for w, t in zip(widths, types, strict=True)],
                   [max((bounds.get((m, t), (None, None))[1] or w) - w, 0.0) for w, t in zip(widths, types, strict=True)]]
            bars = ax.barh(ys, widths, height=height, label=m, color=PALETTE[i % len(PALETTE)],
                           xerr=err if bounds else None, error_kw={"linewidth": 0.8, "capsize": 2})
            # the value at each bar's end, so a zero score reads as 0.0 rather than a missing bar
            ax.bar_label(bars, labels=["–" if value.get((m, t)) is None else f"{value[m, t]:.1f}" for t in types],
                         padding=2, fontsize=7)
        ax.set_yticks(range(len(types)), types)
        ax.invert_yaxis()
        ax.set_xlim(0, 100)
        ax.set_xlabel("test F1 (points, silver labels)")
        ax.set_title("NER F1 per entity type")
        if models:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        else:
            ax.text(0.5, 0.5, "no NER results", ha="center", va="center", transform=ax.transAxes)

    return _figure(max(3.0, 0.3 * len(types) * max(1, len(models)) ** 0.5 + 1.2), draw)


def fertility_png(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """Bars of how many validation words take 1, 2, ... WordPiece tokens (share of words, %).

    ``rows``: the tokenizer fertility table's rows (``tokens_per_word``, ``count``).
    """
    xs, counts = _series(rows, "tokens_per_word", "count")
    total = sum(counts) or 1.0

    def draw(fig):
        ax = fig.subplots()
        ticks = [int(x) for x in xs]
        ax.bar(ticks, [100 * c / total for c in counts], color=PALETTE[0])
        ax.set_xticks(ticks)
        ax.set_xlabel("WordPiece tokens per word")
        ax.set_ylabel("share of validation words (%)")
        ax.set_title("Tokenizer fertility")

    return _figure(3.0, draw)


HISTORY_COLUMNS = ("step", "train_loss", "eval_mlm_loss", "eval_mlm_accuracy")
"""Columns a training history CSV must have for :func:`training_curves_png`."""


@dataclass(frozen=True, kw_only=True)
class FigureSources:
    """The files :func:`family_figures` reads, each with the repository-relative name the caption cites (given by
    the caller); a path that is None or does not exist gives no figure (a profile without that stage's output).
    ``cite_evaluate_plots``: the folder of the plot tables the family figures are drawn from; ``cite_budget_curve``:
    the budget curve's record."""

    pretrain_history: Path | None = None
    distill_history: Path | None = None
    fertility: Path | None = None
    cite_pretrain_history: str
    cite_distill_history: str
    cite_fertility: str
    cite_evaluate_plots: str
    cite_budget_curve: str


def family_figures(sources: FigureSources, *, score_vs_speed: Sequence[Sequence[Any]],
                   confusion: Mapping[str, Sequence[Sequence[str]]], ner_per_type: Sequence[Sequence[Any]],
                   reference: str | None = None, budget_curve: Mapping[str, Any] | None = None) -> list[ReportFigure]:
    """The report's figures, in page order: pre-training and distillation curves, the budget curve (two points or
    more of ``budget_curve``, cited as ``sources.cite_budget_curve``), score vs speed (wall clock), the sentiment confusion
    matrices, NER F1 per type, tokenizer fertility; a figure without data is left out.

    Raises:
        PipelineError: a history or fertility CSV lacks its columns (one line naming the file).
    """
    out = []
    for path, cite, name, title in (
            (sources.pretrain_history, sources.cite_pretrain_history, "pretrain_curves.png", "Pre-training (teacher)"),
            (sources.distill_history, sources.cite_distill_history, "distill_curves.png", "Distillation (student)")):
        rows = read_csv_rows(path, HISTORY_COLUMNS) if path else None
        if rows:
            out.append(ReportFigure(name, f"{title}: train loss, held-out MLM loss and accuracy by step", cite,
                                    training_curves_png(rows, title)))
    if budget_curve and len(budget_curve.get("points", ())) > 1:
        out.append(ReportFigure("budget_curve.png", "Pre-training gain over from scratch against tokens seen (test "
                                "main metric, seeds' range)", sources.cite_budget_curve,
                                budget_curve_png(budget_curve)))
    plots = sources.cite_evaluate_plots
    if score_vs_speed:
        out.append(ReportFigure("score_vs_speed.png", "Average test score against CPU speed at batch 1 (wall clock)",
                                f"{plots}/score_vs_speed.csv", score_vs_speed_png(score_vs_speed, reference)))
    if confusion:
        out.append(ReportFigure("sentiment_confusion.png", "Sentiment confusion matrix per model (saved model, "
                                "first seed)", f"{plots}/sentiment_confusion/", confusion_png(confusion)))
    if ner_per_type:
        out.append(ReportFigure("ner_f1_per_type.png", "NER test F1 per entity type (silver labels)",
                                f"{plots}/ner_f1_per_type.csv", ner_per_type_png(ner_per_type)))
    rows = read_csv_rows(sources.fertility, ("tokens_per_word", "count")) if sources.fertility else None
    if rows:
        out.append(ReportFigure("tokenizer_fertility.png", "WordPiece tokens per validation word",
                                sources.cite_fertility, fertility_png(rows)))
    return out
