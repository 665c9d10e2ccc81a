"""Stage ``pretrain``: BERT pre-training (MLM + NSP/SOP, or MLM only) on ``data/pretraining/``.

    python -m stages.pretrain          (dvc repro pretrain; under accelerate launch when compute.num_processes > 1)

Reads ``pretrain`` (start point, size, optimizer, schedule, phases) and the data built by
``create_pretraining_data`` (its ``info.json`` says the objective, tokenizer and ``max_seq_length``), trains with
:func:`bert_pipeline.train.pretrain.run_pretraining`, resuming from ``checkpoints/pretrain/`` when a checkpoint
of the same params and inputs exists, and writes:

- ``models/pretrained/``: ``save_pretrained`` (safetensors) ``BertForPreTraining`` (``BertForMaskedLM`` for
  objective ``none``) with the tokenizer beside it (its model card is stage ``model_cards``'s);
- ``metrics/pretrain.json``: tokens seen, held-out MLM loss/accuracy, perplexity, pair accuracy, unigram baseline,
  first vs last evaluation, parameters, and the resolved ``precision`` and ``num_processes`` the card cites
  (byte-identical across reruns on CPU);
- ``metrics/pretrain-timing.json``: seconds, tokens/s, model FLOPs utilisation against the measured matmul peak;
- ``plots/pretrain.csv``: step, train loss, learning rate, eval MLM loss/accuracy, pair accuracy;
- an MLflow run with a pointer to the model, not a copy.

Opening and training the model are :mod:`stages.pretraining`'s (:func:`stages.pretraining.load_pretraining`,
:func:`stages.pretraining.pretrain_model`), shared with the stages that pre-train models of their own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, atomic_write_text, write_json
from stages import require_inputs
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.pretrain import PretrainView
from stages.pretraining import DATA_DIR, load_pretraining, pretrain_model

log = logging.getLogger(__name__)

MODEL_DIR = Path("models/pretrained")
CHECKPOINT_DIR = Path("checkpoints/pretrain")
METRICS = Path("metrics/pretrain.json")
TIMING = Path("metrics/pretrain-timing.json")
PLOT = Path("plots/pretrain.csv")
LAUNCHED = "BERT_PIPELINE_LAUNCHED"  # set on the processes that _relaunch_distributed starts


def under_launcher() -> bool:
    """Whether a distributed launcher started this process: ``accelerate launch`` (several processes) and
    ``torchrun`` set ``WORLD_SIZE`` and ``LOCAL_RANK`` on each process they start."""
    return "WORLD_SIZE" in os.environ or "LOCAL_RANK" in os.environ


def _relaunch_distributed(num_processes: int, config_file: str | None) -> None:
    """Run this stage under ``accelerate launch`` with ``num_processes`` processes on this machine, then return.

    Without ``config_file`` it is DDP through accelerate's torch-elastic launcher (``--multi_gpu``: on a machine
    without GPUs accelerate runs the same processes on CPU with the ``gloo`` backend) on a free port; with it the
    file's ``distributed_type`` (FSDP in ``profiles/accelerate/fsdp.yaml``), port and machines decide. Several
    machines take one command each instead (README, "Several processes, several machines").

    Raises:
        PipelineError: the launched run failed.
    """
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(num_processes)]
    if config_file:
        cmd += ["--config_file", config_file]
    else:  # the precision is pretrain.precision's (make_runtime); these flags only spare accelerate's warning
        cmd += ["--multi_gpu", "--num_machines", "1", "--main_process_port", "0", "--mixed_precision", "no",
                "--dynamo_backend", "no"]
    cmd += ["-m", "stages.pretrain"]
    log.info("launching: %s", " ".join(cmd))
    if subprocess.run(cmd, env={**os.environ, LAUNCHED: "1"}).returncode != 0:
        raise PipelineError(f"pretrain.compute.num_processes: accelerate launch with {num_processes} processes failed")


def main() -> None:
    require_inputs("pretrain")
    view = load_view(PretrainView)
    p = view.pretrain
    if p.compute.num_processes > 1 and not under_launcher():
        if os.environ.get(LAUNCHED):  # the launcher started one plain process (e.g. distributed_type NO)
            raise PipelineError(f"pretrain.compute.accelerate_config: accelerate launch started one process, not "
                                f"pretrain.compute.num_processes={p.compute.num_processes} (expected a config "
                                f"with distributed_type MULTI_GPU, MULTI_CPU or FSDP)")
        config = p.compute.accelerate_config
        if config and not Path(config).is_file():
            raise PipelineError(f"pretrain.compute.accelerate_config: {config} not found (expected a YAML file of "
                                "`accelerate config`, e.g. profiles/accelerate/fsdp.yaml, or null for plain DDP)")
        _relaunch_distributed(p.compute.num_processes, config)
        return

    from bert_pipeline.model.configs import save_model
    from bert_pipeline.train import pretrain as pretraining
    from bert_pipeline.train.runtime import RuntimeSettingError, make_runtime
    from stages import dvc_adapter

    loaded = load_pretraining(p)
    objective = view.create_pretraining_data.objective
    if loaded.data.objective != objective:  # data/pretraining was built before the objective changed
        raise PipelineError(f"{DATA_DIR}/info.json: built for create_pretraining_data.objective "
                            f"{loaded.data.objective!r}, params.yaml says {objective!r}; run `dvc repro "
                            f"create_pretraining_data` first")
    try:
        runtime = make_runtime(p.precision)
    except RuntimeSettingError as exc:
        raise PipelineError(f"pretrain.{exc}") from None
    if runtime.num_processes != p.compute.num_processes:
        raise PipelineError(f"pretrain.compute.num_processes: {p.compute.num_processes}, but the launcher started "
                            f"{runtime.num_processes} processes (expected the total over every machine)")
    main_process = runtime.is_main_process
    section = p.model_dump(mode="json")
    tracked = {"pretrain": section, "create_pretraining_data.objective": loaded.data.objective}
    with dvc_adapter.stage_run("pretrain", tracked) if main_process else contextlib.nullcontext() as run:
        def on_log(step: int, row: dict) -> None:
            if run is not None:
                run.log_metrics({k: v for k, v in row.items() if k != "step"}, step=step)

        outcome = pretrain_model(p, loaded, CHECKPOINT_DIR, runtime, on_log)
        tokenizer = loaded.tokenizer
        if not main_process:
            return
        # the facts only the run knows, recorded for the model card (stage model_cards)
        quality = {**outcome.quality, "precision": runtime.precision, "num_processes": runtime.num_processes}
        with atomic_dir(MODEL_DIR) as out:
            save_model(outcome.model, out, tokenizer)
        write_json(METRICS, quality)
        write_headline("pretrain", {"pretrain": {k: outcome.quality["eval"][k] for k in ("mlm_accuracy", "mlm_loss")}})
        atomic_write_text(PLOT, pretraining.history_csv(outcome.result.history, pretraining.PLOT_COLUMNS))
        write_json(TIMING, outcome.timing)
        run.log_metrics({f"final_{k}": v for k, v in outcome.quality["eval"].items()}, step=p.max_steps)
        run.log_metrics({k: v for k, v in outcome.timing.items() if isinstance(v, (int, float))}, step=p.max_steps)
        run.log_model_pointer(MODEL_DIR)
        for path in (METRICS, TIMING, PLOT):
            run.log_artifact(path)


if __name__ == "__main__":
    run_main(main)
