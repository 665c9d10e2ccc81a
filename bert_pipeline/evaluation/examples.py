"""The per-example record of a trained member's held-out evaluations: what each validation and test example
contributed to each seed's score, stored as sufficient statistics (no text), so intervals, paired comparisons and
later challengers read it instead of predicting again (ARCHITECTURE.md, "Per-example results").

One record per member and task (:class:`ExampleRecord`), one Arrow IPC file (uncompressed: byte-identical for the
same content). A row is one example of one split in one run: ``split`` (``validation`` / ``test``), ``run``
(``full``, ``low_resource``), ``seed``, ``id`` (the example's stable id), ``cluster`` (the unit it was sampled with:
its source article or film), then the kind's columns (:meth:`bert_pipeline.tasks.base.TaskKind.example_columns`).
A member's retrieval runs are a record too (kind ``retrieval``, runs ``zero_shot`` / ``fine_tuned``, a query per
row and its gold rank: :func:`bert_pipeline.evaluation.retrieval.retrieval_record`).
The schema's metadata holds the kind, main metric, label names and each split's hash (:func:`split_hash`), so two
records can be checked for pairing before they are compared.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1
"""The record's layout version (``format`` in the metadata); a reader refuses another."""

CLUSTER_COLUMNS = ("doc_id", "film")
"""The task columns that name the unit an example was sampled with, first found wins (the built-in tasks split by
article or by film: examples that share one are not independent); a task with none has one cluster per example."""

KEY_COLUMNS = ("split", "run", "seed", "id", "cluster")
"""The columns every row has before the kind's."""


class ExamplesError(ValueError):
    """A per-example record that cannot be read or paired (the message names the file and what differs)."""


def split_keys(ds: Any, rows: Sequence[int], split: str) -> tuple[list[str], list[str]]:
    """``(ids, clusters)`` of a held-out subset: the ``id`` column where the task has one, else ``SPLIT:ROW``
    (``rows``: each example's row in the whole split, :func:`bert_pipeline.train.finetune_data.subsample_indices`);
    the cluster from the first :data:`CLUSTER_COLUMNS` column present, else the id."""
    names = ds.column_names
    ids = [str(x) for x in ds["id"]] if "id" in names else [f"{split}:{r}" for r in rows]
    for col in CLUSTER_COLUMNS:
        if col in names:
            return ids, [str(x) for x in ds[col]]
    return ids, list(ids)


def split_hash(ids: Sequence[str], references: Sequence[Any]) -> str:
    """sha256 over the ids and gold references of a split, in order: two records with the same hash scored the
    same examples against the same gold (what pairing needs)."""
    payload = json.dumps([list(ids), [_plain(r) for r in references]], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


def _plain(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


@dataclass(frozen=True)
class SplitInfo:
    """One held-out split's examples: ``ids`` and ``clusters`` in the split's order and its :func:`split_hash`."""

    ids: list[str]
    clusters: list[str]
    hash: str


@dataclass
class ExampleRecord:
    """One member's per-example results on one task.

    Attributes:
        kind: the task kind (:mod:`bert_pipeline.tasks`); ``main_metric``; ``label_names`` (or None).
        splits: per split its :class:`SplitInfo`.
        runs: ``{(split, run, seed): {column: (n,) array}}`` in the split's example order.
    """

    kind: str
    main_metric: str
    label_names: list[str] | None
    splits: dict[str, SplitInfo] = field(default_factory=dict)
    runs: dict[tuple[str, str, int], dict[str, np.ndarray]] = field(default_factory=dict)

    def add(self, split: str, run: str, seed: int, columns: dict[str, np.ndarray]) -> None:
        """Add one run's columns on ``split`` (whose :class:`SplitInfo` must be set).

        Raises:
            ExamplesError: columns whose length is not the split's.
        """
        n = len(self.splits[split].ids)
        bad = [k for k, v in columns.items() if len(v) != n]
        if bad:
            raise ExamplesError(f"{split}: column {bad[0]!r} has {len(columns[bad[0]])} rows; the split has {n}")
        self.runs[(split, run, int(seed))] = {k: np.asarray(v) for k, v in columns.items()}

    def seeds(self, split: str, run: str = "full") -> list[int]:
        """The seeds with a run on ``split``, ascending."""
        return sorted(s for (sp, r, s) in self.runs if sp == split and r == run)

    # ------------------------------------------------------------------------------------------------ I/O
    def to_bytes(self) -> bytes:
        """The record as one Arrow IPC file (uncompressed), rows ordered by split, run, seed, example."""
        import pyarrow as pa

        keys = sorted(self.runs, key=lambda k: (k[0], k[1], k[2]))
        cols: dict[str, list[Any]] = {c: [] for c in KEY_COLUMNS}
        names = sorted({c for k in keys for c in self.runs[k]})
        data: dict[str, list[np.ndarray]] = {c: [] for c in names}
        for key in keys:
            split, run, seed = key
            info = self.splits[split]
            n = len(info.ids)
            cols["split"] += [split] * n
            cols["run"] += [run] * n
            cols["seed"] += [seed] * n
            cols["id"] += info.ids
            cols["cluster"] += info.clusters
            for c in names:
                data[c].append(self.runs[key][c])
        arrays = {"split": pa.array(cols["split"], pa.string()), "run": pa.array(cols["run"], pa.string()),
                  "seed": pa.array(cols["seed"], pa.int64()), "id": pa.array(cols["id"], pa.string()),
                  "cluster": pa.array(cols["cluster"], pa.string())}
        for c in names:
            arrays[c] = pa.array(np.concatenate(data[c]) if data[c] else np.zeros(0))
        meta = {"format": FORMAT, "kind": self.kind, "main_metric": self.main_metric, "label_names": self.label_names,
                "split_hashes": {s: info.hash for s, info in sorted(self.splits.items())}}
        table = pa.table(arrays).replace_schema_metadata({"bert_pipeline": json.dumps(meta, sort_keys=True)})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes()

    def write(self, path: str | Path) -> None:
        """Write :meth:`to_bytes` to ``path`` atomically."""
        from bert_pipeline.io import atomic_write_bytes

        atomic_write_bytes(path, self.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes, source: str) -> ExampleRecord:
        """Read a record written by :meth:`to_bytes`; ``source`` names it in errors.

        Raises:
            ExamplesError: not an Arrow file of this layout (one line naming ``source``).
        """
        import pyarrow as pa

        try:
            table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
            meta = json.loads((table.schema.metadata or {})[b"bert_pipeline"])
        except (pa.ArrowInvalid, KeyError, ValueError) as exc:
            raise ExamplesError(f"{source}: not a per-example record ({exc})") from None
        if meta.get("format") != FORMAT:
            raise ExamplesError(f"{source}: per-example record format {meta.get('format')!r}; expected {FORMAT} "
                                f"(rerun the stage that wrote it)")
        rec = cls(meta["kind"], meta["main_metric"], meta["label_names"])
        split = table.column("split").to_numpy(zero_copy_only=False)
        run = table.column("run").to_numpy(zero_copy_only=False)
        seed = table.column("seed").to_numpy()
        ids = table.column("id").to_numpy(zero_copy_only=False)
        clusters = table.column("cluster").to_numpy(zero_copy_only=False)
        names = [c for c in table.column_names if c not in KEY_COLUMNS]
        values = {c: table.column(c).to_numpy(zero_copy_only=False) for c in names}
        # rows are grouped by (split, run, seed): cut the table where the key changes
        change = np.flatnonzero((split[1:] != split[:-1]) | (run[1:] != run[:-1]) | (seed[1:] != seed[:-1])) + 1
        for lo, hi in zip(np.r_[0, change], np.r_[change, len(split)], strict=True):
            if hi <= lo:
                continue
            s = str(split[lo])
            if s not in rec.splits:
                rec.splits[s] = SplitInfo([str(x) for x in ids[lo:hi]], [str(x) for x in clusters[lo:hi]],
                                          meta["split_hashes"][s])
            rec.runs[(s, str(run[lo]), int(seed[lo]))] = {c: values[c][lo:hi] for c in names}
        return rec

    @classmethod
    def read(cls, path: str | Path) -> ExampleRecord:
        """:meth:`from_bytes` of the file at ``path``."""
        return cls.from_bytes(Path(path).read_bytes(), str(path))


def check_paired(a: ExampleRecord, b: ExampleRecord, split: str, a_name: str, b_name: str) -> None:
    """Raises :class:`ExamplesError` unless both records scored the same examples of ``split`` against the same
    gold (equal :func:`split_hash`), with the same kind and labels: a paired difference needs it."""
    for rec, name in ((a, a_name), (b, b_name)):
        if split not in rec.splits:
            raise ExamplesError(f"{name}: no {split} examples in its per-example record")
    if (a.kind, a.label_names) != (b.kind, b.label_names):
        raise ExamplesError(f"{a_name} ({a.kind}) and {b_name} ({b.kind}) are different tasks: not paired")
    if a.splits[split].hash != b.splits[split].hash:
        raise ExamplesError(f"{a_name} and {b_name} scored different {split} examples "
                            f"({len(a.splits[split].ids)} vs {len(b.splits[split].ids)}, split hashes "
                            f"{a.splits[split].hash[:12]} vs {b.splits[split].hash[:12]}): not paired")


def merge_seeds(records: Sequence[ExampleRecord], names: Sequence[str]) -> ExampleRecord:
    """One record holding the runs of several records of the same member and task made at different seeds (e.g. a
    baseline at seed 42 and an experiment at seed 43), so the seeds are resampled together (the multi-bootstrap).
    ``names`` name the records in errors.

    Raises:
        ExamplesError: no records, records of different tasks or held-out examples (:func:`check_paired` on
            every split), or a (split, run, seed) that two records both hold.
    """
    if not records:
        raise ExamplesError("nothing to merge")
    first = records[0]
    out = ExampleRecord(first.kind, first.main_metric, first.label_names, dict(first.splits), dict(first.runs))
    for rec, name in zip(records[1:], names[1:], strict=True):
        for split in rec.splits:
            check_paired(out, rec, split, names[0], name)
        both = sorted(set(out.runs) & set(rec.runs))
        if both:
            split, run, seed = both[0]
            raise ExamplesError(f"{names[0]} and {name} both hold the {run} run at seed {seed} on {split}: "
                                "merge records of different seeds")
        out.runs.update(rec.runs)
    return out
