"""The pre-training glue that several stages share (not a stage): a ``pretrain`` section in, the tokenizer, data and
model opened (:func:`load_pretraining`) and trained (:func:`pretrain_model`) through
:mod:`bert_pipeline.train.pretrain`.

Stage ``pretrain`` trains the pipeline's model with it; ``budget_curve`` (other ``max_steps``) and ``variants`` (each
family on its own vocabulary and data) train theirs with the same code, so no stage imports another. It reads typed
params sections and names the DVC layout, which is why it lives here and not in :mod:`bert_pipeline`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.params.pretrain import PretrainParams

log = logging.getLogger(__name__)

DATA_DIR = Path("data/pretraining")
# Keys that change how often we save or how the work is spread, not what is trained: not part of the checkpoint
# fingerprint (compute.num_processes is, through the global batch: load_pretraining adds it).
NOT_FINGERPRINTED = ("save_steps", "save_total_limit", "compute")


@dataclass
class Loaded:
    """What :func:`load_pretraining` opened: the tokenizer, the data (:func:`open_pretraining_data`), the model to
    train and the checkpoint fingerprint of these settings and inputs."""

    tokenizer: Any
    data: Any
    model: Any
    fingerprint: str


def load_pretraining(p: PretrainParams, *, data_dir: Path = DATA_DIR, tokenizer_path: Path | None = None) -> Loaded:
    """Open the tokenizer and ``data_dir`` (``data/pretraining/``) and build the model that ``p`` (a ``pretrain``
    section) describes, before any run or output is started. ``tokenizer_path`` (default ``p.tokenizer_path``, the
    one ``pretrain.init`` decides) lets the ``variants`` stage pre-train a family on its own vocabulary and data.

    Raises:
        PipelineError: the tokenizer or data is missing or malformed, or the size/config is not valid.
    """
    from bert_pipeline.data.tokenizer import load_tokenizer
    from bert_pipeline.train import pretrain as pretraining
    from bert_pipeline.train.checkpoint import fingerprint

    tokenizer_path = Path(tokenizer_path or p.tokenizer_path)
    tokenizer = load_tokenizer(tokenizer_path, hint=f"the tokenizer that pretrain.init={p.init!r} decides")
    data = pretraining.open_pretraining_data(
        Path(data_dir), tokenizer, init=p.init, phases=[pretraining.PhaseSpec(**ph.model_dump()) for ph in p.phases],
        max_steps=p.max_steps, batch_size=p.batch_size, num_processes=p.compute.num_processes, seed=p.seed)
    model = pretraining.build_pretraining_model(
        p.init, size=p.model.size, config=p.model.config, tokenizer=tokenizer, max_seq_length=data.max_seq_length,
        with_pair_head=data.pair_key is not None, seed=p.seed, family=p.model.family,
        embedding_size=p.model.embedding_size, share_layers=p.model.share_layers)
    if p.dropout is not None:
        from bert_pipeline.model.configs import set_dropout

        log.info("pretrain.dropout: %d dropout layers at %g while pre-training (the saved config keeps its rates)",
                 set_dropout(model, p.dropout), p.dropout)
    section = p.model_dump(mode="json")
    settings = {"pretrain": {k: v for k, v in section.items() if k not in NOT_FINGERPRINTED},
                "objective": data.objective}
    if p.compute.num_processes > 1:  # the global batch is batch_size x num_processes (one process: as before)
        settings["num_processes"] = p.compute.num_processes
    fp = fingerprint(settings, [tokenizer_path, *data.folders])
    return Loaded(tokenizer, data, model, fp)


def pretrain_model(p: PretrainParams, loaded: Loaded, checkpoint_dir: Path | None, runtime: Any,
                   on_log: Any = None) -> Any:
    """Pre-train ``loaded.model`` as ``p`` (a ``pretrain`` section) says, resuming from ``checkpoint_dir`` when it
    holds a checkpoint of the same fingerprint; returns :class:`bert_pipeline.train.pretrain.PretrainingOutcome`
    and writes nothing but checkpoints (``checkpoint_dir`` None: none, and none resumed from). Stage ``pretrain``'s
    training, shared with ``budget_curve`` (other ``max_steps``, the same code), ``variants`` and
    ``bench/analysis/pretrain_seeds.py``.

    Raises:
        PipelineError: training failed (too many non-finite steps, too little data).
    """
    from bert_pipeline.train import pretrain as pretraining
    from bert_pipeline.train.checkpoint import CheckpointManager
    from bert_pipeline.train.loop import TrainConfig

    config = TrainConfig(**p.model_dump(include=set(TrainConfig.__dataclass_fields__)), num_workers=p.compute.num_workers)
    return pretraining.run_pretraining(
        loaded.model, loaded.data, config, runtime,
        CheckpointManager(checkpoint_dir, loaded.fingerprint, keep=p.save_total_limit)
        if checkpoint_dir is not None else None,
        describe={"init": p.init, "size": p.model.size if p.init == "scratch" else "checkpoint"}, on_log=on_log)
