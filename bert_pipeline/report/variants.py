"""The BERT variants compared on our data: BERT, RoBERTa and ALBERT pre-trained at the same size and token budget
from the same corpus, each fine-tuned on the same tasks, beside the figures their papers published.

What each variant changed (the recipes :data:`RECIPES` applies, each from its family's entry of
:data:`bert_pipeline.model.families.FAMILIES`; everything else shared):

- BERT (Devlin et al. 2019, section 3.1): WordPiece vocabulary, MLM + next-sentence prediction (pairs of whole
  sentences, whatever the pipeline's packing), static masking.
- RoBERTa (Liu et al. 2019, sections 4.1-4.4): byte-level BPE vocabulary, MLM only (no NSP, full sentences packed
  to the length), dynamic masking (a fresh mask each time an instance is read), no token types.
- ALBERT (Lan et al. 2020, section 3.1): factorised embedding (``embedding_size`` < hidden size), all encoder
  layers sharing one set of weights, sentence-order prediction instead of NSP (whole sentences, as BERT's pairs),
  a SentencePiece-style Unigram vocabulary.
- ModernBERT (Warner et al. 2024) and DeBERTa (He et al. 2021; v3's attention settings, He et al. 2023): their
  architectures on the pipeline's own WordPiece vocabulary (:attr:`bert_pipeline.model.families.Family.vocabulary`:
  the comparison with BERT is about the architecture, not ModernBERT's 50k BPE or DeBERTa-v3's 128k SentencePiece
  vocabulary), MLM only (neither class has a pair head), the pipeline's packing as RoBERTa's recipe, dynamic
  masking: all three MLM-only families then see the same kind of data, and both papers pre-train on masks drawn
  afresh (ModernBERT at a 30% rate, which we do not copy: the rate stays the pipeline's). DeBERTa-v3 itself
  pre-trains with replaced token detection (ELECTRA-style); the pipeline trains its architecture with MLM.

The published columns (:data:`PUBLISHED`, from the family entries) are the Base models' figures as the seeds quote them (GLUE average,
parameters, relative inference speed against BERT-Base); they are never mixed with ours: the report prints them in
their own columns, labelled as published. DistilBERT (Sanh et al. 2019) has a published row; our counterpart is
the pipeline's own distilled student (its own recipe and budget, said so in the table).

Every figure of ours carries its interval (:func:`with_intervals`): each task's score, each family's gain over its
own scratch and its difference from BERT (the same task, the same held-out examples), and their means over tasks,
from the members' per-example records with the paired bootstrap (:mod:`bert_pipeline.report.contrasts`): test
examples resampled by source article or film, seeds too where there are several.

Everything here reads records and returns Markdown; the ``variants`` stage trains the variants and writes the
record (:func:`variants_record`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError
from bert_pipeline.evaluation.intervals import Bootstrap, Estimate
from bert_pipeline.model.families import BASE_FAMILY, FAMILIES, Published, Recipe
from bert_pipeline.report.contrasts import (
    bracketed,
    check_pairable,
    check_seed_scores,
    estimate,
    interval_entry,
    mean_interval,
    mixed_sources,
    settings,
    sources_text,
)
from bert_pipeline.report.report import markdown_table

# ALBERT-Base factorises a 768 hidden size through E = 128 (Lan et al. 2020, Table 1): a sixth of the width; for
# the small sizes we keep the same ratio, rounded up to 16 (the stage computes it from the size's hidden size).
ALBERT_EMBEDDING_RATIO = 6
# each family's recipe, from its entry of the family table
RECIPES: dict[str, Recipe] = {name: family.recipe for name, family in FAMILIES.items()}
# each family's published figures from its entry of the family table, and DistilBERT's beside our distilled student
PUBLISHED: dict[str, Published] = {**{name: family.published for name, family in FAMILIES.items()},
                                   "distilled": Published("DistilBERT", 77.0, 66, 1.6)}
SIDES = ("pretrained", "scratch")
"""The two members of a family whose per-example records :func:`with_intervals` reads: its pre-trained model and its
own scratch."""
BASE_DIFFERENCE = f"difference_from_{BASE_FAMILY}"
"""The row key of a family's difference from the base family (BERT) on each task."""


def albert_embedding_size(hidden_size: int) -> int:
    """ALBERT's factorised embedding size E for a hidden size H: H / :data:`ALBERT_EMBEDDING_RATIO`, rounded up to a
    multiple of 16 and at most H (768 -> 128 as in ALBERT-Base)."""
    size = -(-hidden_size // ALBERT_EMBEDDING_RATIO)
    return min(hidden_size, -(-size // 16) * 16)


def _published_cells(pub: Published) -> list[str]:
    """The four published cells (model, GLUE, parameters, speed); an empty cell where the figure is None."""
    return [pub.name, "" if pub.glue is None else f"{pub.glue:.1f}",
            "" if pub.parameters_m is None else f"{pub.parameters_m:g}M", "" if pub.speed is None else f"{pub.speed:g}x"]


def recipe_of(family: str) -> Recipe:
    """The recipe of ``family``.

    Raises:
        PipelineError: an unknown family (one line naming the known ones).
    """
    try:
        return RECIPES[family]
    except KeyError:
        raise PipelineError(f"variants.families: unknown family {family!r} (expected {', '.join(RECIPES)})") from None


def variants_record(rows: Sequence[Mapping[str, Any]], *, member: str, tasks: Sequence[str],
                    seeds: Sequence[int], boot: Bootstrap | None = None) -> dict[str, Any]:
    """The stage's quality record: ``{"member", "tasks", "seeds", "families": [row, ...]}`` (with ``boot``, the
    bootstrap of the rows' intervals, ``"intervals"``: its settings), each row
    ``{"family", "recipe", "parameters", "steps", "learning_rate", "tokens_seen", "mlm_loss", "mlm_accuracy",
    "scores": {task: {"metric", "mean", "seeds", "validation_mean"}}}`` plus, when the family's own scratch was
    fine-tuned (``variants.scratch``), ``"scratch_scores"`` of the same shape (steps: optimizer steps;
    ``learning_rate``: the peak pre-training rate; ``mlm_loss``: held-out MLM cross-entropy in nats; scores:
    fractions of the main metric, test mean and per-seed values, validation mean over seeds, 6 decimals; no
    wall-clock figures, those go to the timing record), and the intervals :func:`with_intervals` adds. Records
    written before ``learning_rate``, ``mlm_loss``, ``validation_mean``, ``scratch_scores`` or the intervals lack
    them; :func:`variants_section` leaves their cells empty (or the point alone)."""
    extra = {"intervals": settings(boot)} if boot is not None else {}
    return {"member": member, "tasks": list(tasks), "seeds": list(seeds), **extra,
            "families": [dict(r) for r in rows]}


def with_intervals(rows: Sequence[Mapping[str, Any]], records: Mapping[tuple[str, str, str], ExampleRecord],
                   tasks: Sequence[str], boot: Bootstrap) -> list[dict[str, Any]]:
    """The rows with every figure's interval, from the members' per-example records (``records``: ``{(family,
    side, task): record}``, side one of :data:`SIDES`; the test split's full runs):

    - each task's entry of ``scores`` and ``scratch_scores``: ``"ci_low", "ci_high", "sources"`` of its test mean;
    - ``"average"``: the mean over ``tasks`` of the test scores, ``{"mean", "ci_low", "ci_high", "sources"}``;
    - ``"gain_over_scratch"`` (a row with ``scratch_scores``): per task and under ``"average"``, the pre-trained
      model's test score minus its scratch's, ``{"mean", "ci_low", "ci_high", "sources"}`` (per task also
      ``"seeds"``, the per-seed differences), paired on examples and seeds;
    - :data:`BASE_DIFFERENCE` (each row but BERT's, when BERT is a row): the same against BERT's pre-trained
      model, on the same task's same held-out examples.

    Fractions rounded to 6 decimals. Each record's per-seed scores must be its row's.

    Raises:
        ExamplesError: a record missing, records not paired (other examples or seeds), or per-seed scores other
            than the row's (one line naming the family, side and task).
    """
    est: dict[tuple[str, str], dict[str, Estimate]] = {}
    for row in rows:
        for side in SIDES:
            if not row.get(_key(side)):
                continue
            for task in tasks:
                name = f"{row['family']} {'pre-trained' if side == 'pretrained' else 'scratch'} on {task}"
                rec = records.get((row["family"], side, task))
                if rec is None:
                    raise ExamplesError(f"{name}: no per-example record")
                e = estimate(rec, boot)
                check_seed_scores(e, row[_key(side)][task]["seeds"], name)
                est.setdefault((row["family"], side), {})[task] = e
    by_family = {row["family"]: row for row in rows}

    def contrast(family: str, ref: tuple[str, str], ref_name: str) -> dict[str, Any]:
        """``family``'s pre-trained model minus ``ref`` (family, side) on each task, and their mean."""
        own, other, entries = est[(family, "pretrained")], est[ref], {}
        for t in tasks:
            check_pairable(records[(family, "pretrained", t)], records[(*ref, t)], (f"{family} on {t}",
                                                                                    f"{ref_name} on {t}"))
            a, b = by_family[family]["scores"][t], by_family[ref[0]][_key(ref[1])][t]
            entries[t] = {"mean": round(a["mean"] - b["mean"], 6),
                          "seeds": [round(x - y, 6) for x, y in zip(a["seeds"], b["seeds"], strict=True)],
                          **interval_entry(boot.difference(own[t], other[t]))}
        entries["average"] = {"mean": round(sum(entries[t]["mean"] for t in tasks) / len(tasks), 6),
                              **interval_entry(mean_interval(boot, [(own[t], other[t]) for t in tasks]))}
        return entries

    out = []
    for row in rows:
        family, new = row["family"], dict(row)
        for side in SIDES:
            if (family, side) in est:
                new[_key(side)] = {t: {**row[_key(side)][t], **interval_entry(boot.score(est[(family, side)][t]))}
                                   for t in tasks}
        own = est[(family, "pretrained")]
        new["average"] = {"mean": round(sum(row["scores"][t]["mean"] for t in tasks) / len(tasks), 6),
                          **interval_entry(mean_interval(boot, [(own[t], None) for t in tasks]))}
        if (family, "scratch") in est:
            new["gain_over_scratch"] = contrast(family, (family, "scratch"), f"{family}'s own scratch")
        if family != BASE_FAMILY and (BASE_FAMILY, "pretrained") in est:
            new[BASE_DIFFERENCE] = contrast(family, (BASE_FAMILY, "pretrained"), BASE_FAMILY)
        out.append(new)
    return out


def _key(side: str) -> str:
    """A side's scores in a record row: ``scores`` (pre-trained) or ``scratch_scores``."""
    return "scores" if side == "pretrained" else "scratch_scores"


def average(scores: Mapping[str, Mapping[str, Any]], tasks: Sequence[str]) -> float | None:
    """The mean over ``tasks`` of each task's main-metric test mean (fraction), or None when a task is missing."""
    values = [scores[t]["mean"] for t in tasks if t in scores]
    return sum(values) / len(values) if values and len(values) == len(tasks) else None


def _pts(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}"


def scratch_gains(row: Mapping[str, Any], tasks: Sequence[str], key: str = "mean") -> dict[str, float | None]:
    """Per task, and under ``"average"`` over ``tasks``, the row's pre-training gain over its own scratch: the
    pre-trained model's main metric minus the scratch's (fraction; ``key`` ``"mean"``: test, ``"validation_mean"``:
    validation); None where either side lacks the score (a record with no scratch, or written before
    ``validation_mean``), and the average None unless every task has one."""
    own, scratch = row.get("scores") or {}, row.get("scratch_scores") or {}
    gains: dict[str, float | None] = {}
    for task in tasks:
        a, b = (own.get(task) or {}).get(key), (scratch.get(task) or {}).get(key)
        gains[task] = None if a is None or b is None else a - b
    known = [g for g in gains.values() if g is not None]
    gains["average"] = sum(known) / len(known) if known and len(known) == len(tasks) else None
    return gains


def _gain_pts(validation: float | None, test: float | None, interval: Mapping[str, Any] | None = None,
              with_sources: bool = False) -> str:
    """``validation / test`` in signed points (``+3.1 / +2.4``), the test figure with its interval where
    ``interval`` (the record's entry) has one (``+3.1 / +2.4 [0.8, 4.0]``); ``–`` for a side whose figure is None,
    an empty cell when both are."""
    if validation is None and test is None:
        return ""
    test_text = "–" if test is None else bracketed(test, interval, with_sources=with_sources)
    return " / ".join(["–" if validation is None else f"{100 * validation:+.1f}", test_text])


def _entries(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every entry of the record that may carry an interval (scores, averages, gains, differences)."""
    out: list[Mapping[str, Any]] = []
    for row in record["families"]:
        for key in ("scores", "scratch_scores", "gain_over_scratch", BASE_DIFFERENCE):
            out += list((row.get(key) or {}).values())
        if row.get("average"):
            out.append(row["average"])
    return out


def _scratch_table(record: Mapping[str, Any], tasks: Sequence[str], with_sources: bool) -> list[str]:
    """The lines of the "gain over each family's own scratch" table (validation / test, points, per task and
    averaged, the test gain with its interval where the record has one), one row per family whose record has
    ``scratch_scores``; no lines when none has (an old record or ``variants.scratch: false``)."""
    rows = []
    for row in record["families"]:
        if not row.get("scratch_scores"):
            continue
        test, validation = scratch_gains(row, tasks), scratch_gains(row, tasks, "validation_mean")
        intervals = row.get("gain_over_scratch") or {}
        rows.append([f"{row['family']} (ours)", *(_gain_pts(validation[t], test[t], intervals.get(t), with_sources)
                                                  for t in [*tasks, "average"])])
    if not rows:
        return []
    return [
        "Pre-training gain over each family's own scratch (validation / test, points): the pre-trained model's main "
        "metric minus that of the same config and vocabulary with every weight drawn afresh, fine-tuned with the "
        "same settings and seeds (validation: the mean of each seed's best validation score, the split the runs "
        "were chosen on; test: as above, with its paired interval where the record has one).", "",
        markdown_table(["model", *tasks, "average"], rows),
    ]


def _base_table(record: Mapping[str, Any], tasks: Sequence[str], with_sources: bool) -> list[str]:
    """The lines of the "difference from BERT" table (test, points, with intervals), one row per family whose record
    has :data:`BASE_DIFFERENCE`; no lines when none has (no BERT row, or an old record)."""
    rows = []
    for row in record["families"]:
        diff = row.get(BASE_DIFFERENCE)
        if not diff:
            continue
        rows.append([f"{row['family']} (ours)", *("" if diff.get(t) is None else
                                                  bracketed(diff[t]["mean"], diff[t], with_sources=with_sources)
                                                  for t in [*tasks, "average"])])
    if not rows:
        return []
    return [
        f"Difference from our `{BASE_FAMILY}` (test, points): each family's main metric minus `{BASE_FAMILY}`'s on "
        "the same task's same test examples, with its paired interval (examples and seeds drawn alike for both).", "",
        markdown_table(["model", *tasks, "average"], rows),
    ]


def variants_section(record: Mapping[str, Any] | None, timing: Mapping[str, Any] | None, source: str,
                     source_timing: str, distilled: Mapping[str, Any] | None = None) -> str:
    """The report's "BERT variants on our data" section: per family our parameters, pre-training steps and peak
    learning rate, tokens seen, held-out MLM loss (nats) and accuracy, each task's test main metric and their
    average (points), relative inference speed (``timing``: ``{"families": [{"family", "examples_per_second",
    "pretrain_cpu_seconds", ...}]}``; BERT = 1.0x) and pre-training CPU minutes; then the published columns.
    ``distilled`` (``{"parameters", "scores": {task: {"mean"}}, "speed"}``), the pipeline's own student, fills the
    DistilBERT row's "ours" cells. When the record holds each family's own scratch (``scratch_scores``), a second
    table gives each family's pre-training gain over it (validation / test, points); when it holds each family's
    difference from BERT (:data:`BASE_DIFFERENCE`), a third gives it (test, points). Each test figure of ours is
    printed with its interval where the record has one (``72.0 [68.1, 75.9]``, a difference ``+10.4 [6.8, 14.0]``;
    :func:`with_intervals`), and the text says what the intervals resample. A record from before
    ``learning_rate``, ``mlm_loss``, the scratch or the intervals leaves those cells empty (or the point alone) and
    has no second or third table. Empty without a record or without a family.

    Raises:
        PipelineError: a record row names a family with no recipe.
    """
    if not record or not record.get("families"):
        return ""
    tasks = list(record["tasks"])
    times = {t["family"]: t for t in (timing or {}).get("families", ())}
    base_speed = (times.get(BASE_FAMILY) or {}).get("examples_per_second")
    header = ["model", "parameters", "steps", "peak LR", "tokens seen", "held-out MLM loss", "held-out MLM acc",
              *tasks, "average", "relative speed", "pre-training CPU min", "published: model", "published: GLUE",
              "published: parameters", "published: speed"]
    entries = _entries(record)
    mixed = mixed_sources(entries)
    intervals = sources_text(entries, record.get("intervals"))
    rows = []
    for row in record["families"]:
        recipe_of(row["family"])
        own = times.get(row["family"], {})
        speed = own.get("examples_per_second")
        relative = f"{speed / base_speed:.2f}x" if speed and base_speed else ""
        cpu = own.get("pretrain_cpu_seconds")
        rate, loss = row.get("learning_rate"), row.get("mlm_loss")
        pub = PUBLISHED[row["family"]]
        rows.append([f"{row['family']} (ours)", f"{row['parameters'] / 1e6:.2f}M", str(row["steps"]),
                     "" if rate is None else f"{rate:g}", f"{row['tokens_seen'] / 1e6:.2f}M",
                     "" if loss is None else f"{loss:.3f}", f"{100 * row['mlm_accuracy']:.2f}%",
                     *(_score_cell(row["scores"].get(t), mixed) for t in tasks),
                     _score_cell(row.get("average") or {"mean": average(row["scores"], tasks)}, mixed), relative,
                     "" if cpu is None else f"{cpu / 60:.1f}", *_published_cells(pub)])
    pub = PUBLISHED["distilled"]
    if distilled:
        scores = distilled.get("scores", {})
        rows.append(["distilled (ours, the pipeline's student)", f"{distilled['parameters'] / 1e6:.2f}M", "", "", "",
                     "", "", *(_pts(scores.get(t, {}).get("mean")) for t in tasks), _pts(average(scores, tasks)),
                     f"{distilled['speed']:.2f}x" if distilled.get("speed") else "", "",
                     *_published_cells(pub)])
    recipes = "; ".join(f"{f}: {r.tokenizer} vocabulary, objective `{r.objective}`, {r.masking} masking"
                        + (", shared layers" if r.model.get("share_layers") else "")
                        for f, r in RECIPES.items() if any(row["family"] == f for row in record["families"]))
    return "\n".join([
        "## BERT variants on our data", "",
        f"Each family pre-trained at the same size from the same corpus ({recipes}) for the steps at the peak "
        "learning rate (LR) its row gives (pre-training's own, or the family's `variants.budgets` entry: a screen at "
        "equal wall time gives each its own), then "
        f"`{record['member']}`'s fine-tuning on each task: test main metric in points, the mean over seeds "
        f"{list(record['seeds'])}" + (" with its interval" if intervals else "") + "; held-out MLM loss in nats. "
        "Relative speed: the pre-trained encoder's inference throughput (batch 32, "
        f"every family timed in one call), BERT = 1.0x (`{source_timing}`). The published columns are the Base models' figures as the seeds quote them "
        "or as the sources named below the table give them (GLUE average, parameters, speed against BERT-Base; "
        "empty where no source gives one), not measured here; the distilled row is the "
        "pipeline's own student (its own recipe and budget), beside DistilBERT's published figures."
        + (f" {intervals}" if intervals else ""), "",
        markdown_table(header, rows),
        f"Source: `{source}`." + "".join(
            f" Published {PUBLISHED[f].name}: {PUBLISHED[f].source}." for f in dict.fromkeys(
                row["family"] for row in record["families"]) if PUBLISHED[f].source), "",
        *_scratch_table(record, tasks, mixed),
        *_base_table(record, tasks, mixed),
    ])


def _score_cell(entry: Mapping[str, Any] | None, with_sources: bool) -> str:
    """A score of ours in points with its interval where the record has one (``72.0 [68.1, 75.9]``); empty without
    a score."""
    if not entry or entry.get("mean") is None:
        return ""
    return bracketed(entry["mean"], entry, signed=False, with_sources=with_sources)
