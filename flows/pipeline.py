"""The Prefect flow over ``dvc.yaml``: one task per DVC stage, in dependency order.

    python -m flows.pipeline                                  # every stage, in this workspace
    python -m flows.pipeline --stages train_tokenizer         # these stages and their upstream stages
    python -m flows.pipeline --profile smoke                  # in a temporary clone, saved as a DVC experiment
    python -m flows.pipeline --set-param pretrain.max_steps=10 --push

The graph comes from DVC itself (``Repo.index.graph``, foreach/matrix stages expanded), so the flow grows with
``dvc.yaml`` and never restates it. DVC is asked once which stages are out of date; a stage that is neither out of
date nor downstream of one is a task that returns at once. Every other stage runs as ``dvc repro --single-item
STAGE``, so DVC still decides whether it changed and records ``dvc.lock``; its output streams into the task's log.

A failed stage is retried (``orchestration.retries``, ``retry_delay_seconds``); if it still fails, its dependents
fail without running ("upstream stage X failed") while unrelated branches go on, and the flow fails with the
stage's name and its last output lines. A flow run holds its workspace from start to end
(:class:`flows.dvc_cli.WorkspaceLock`): a second flow, or a flow started while another DVC command works there,
stops at once in one line; a ``dvc repro`` started during the flow fails on DVC's lock (between stages, or when it
needs the running stage's files; one of unrelated stages may run beside it, as DVC allows two ``dvc repro`` to);
the first run finishes unharmed. Its stages run one at a time; with ``workers`` (separate clones, see :mod:`flows.worker`) independent stages run in parallel.
Each GPU stage (``orchestration.gpu_stages``) gets devices of its own (``CUDA_VISIBLE_DEVICES``): one, or
``compute.num_processes`` for a multi-process stage (:func:`devices_needed`), reserved together and returned when
it ends; a count above this machine's devices is refused before any stage runs (none is on a CPU machine, where
GPU stages run on the CPU). GPU stages are tagged ``gpu`` for the Prefect concurrency limit.

With a profile or params overrides the user's workspace is never touched (:mod:`flows.workspace`): the run happens
in a temporary clone at ``HEAD`` sharing the DVC cache and is saved as a DVC experiment (``dvc exp show``).
``promote`` (``bert-pipeline promote`` as the last task) never runs for such a throwaway experiment.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from prefect import allow_failure, flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from bert_pipeline.errors import PipelineError
from flows import tracking
from flows.dag import StageGraph, load_graph, lock_entry, merge_lock
from flows.dvc_cli import (
    GIT_ADVICE_ONCE,
    CommandFailed,
    WorkspaceLock,
    dvc,
    handed_over,
    is_git_advice,
    repro_status,
    run_logged,
    tool_env,
)
from flows.worker import git_rev, stage_on_worker
from flows.workspace import make_clone, remove_clone, save_experiment
from stages.params.base import ParamsError


class UpstreamFailed(RuntimeError):
    """A stage that did not run because a stage it depends on failed."""


class PipelineFailed(RuntimeError):
    """The flow's failure: names the failed stage(s) and ends with the first one's last output lines.

    ``summary`` holds the per-stage outcome (the flow's result had it succeeded).
    """

    def __init__(self, message: str, summary: dict[str, Any]):
        super().__init__(message)
        self.summary = summary


# ------------------------------------------------------------------------------------------------- tasks
@task(name="stage", task_run_name="{stage}")
def run_stage(stage: str, root: str, needs_run: bool, env: dict[str, str], tail_lines: int = 20) -> dict[str, Any]:
    """Run one DVC stage in workspace ``root`` (``dvc repro --single-item STAGE``), streaming its output.

    ``needs_run=False`` (``dvc status`` found it and its upstream unchanged) returns at once without a
    subprocess. Returns ``{"stage", "status": "ran" | "restored" | "unchanged" | "skipped", "seconds", "lock"}``.

    Raises:
        CommandFailed: the stage failed; the message ends with its last ``tail_lines`` output lines.
    """
    logger = get_run_logger()
    if not needs_run:
        logger.info("%s: unchanged since dvc.lock (dvc status): skipped", stage)
        return {"stage": stage, "status": "skipped", "seconds": 0.0, "lock": lock_entry(root, stage)}
    started = time.monotonic()
    with handed_over(root) as options:
        tail = run_logged(dvc(*options, "repro", "--single-item", stage), root, logger, tool_env(env), tail_lines,
                          what=f"stage {stage}", drop=is_git_advice)
    return {"stage": stage, "status": repro_status(tail),
            "seconds": round(time.monotonic() - started, 3), "lock": lock_entry(root, stage)}


@task(name="stage-blocked", task_run_name="{stage}")
def stage_blocked(stage: str, failed_upstream: list[str]) -> None:
    """Fail ``stage`` without running it: an upstream stage failed (shown in the UI as a failed task)."""
    raise UpstreamFailed(f"stage {stage} not run: upstream stage {', '.join(failed_upstream)} failed")


@task(name="dvc-push")
def push_outputs(root: str, stages: list[str], remote: str | None, tail_lines: int = 20) -> None:
    """``dvc push`` the outputs of ``stages`` to the DVC remote."""
    args = ["-r", remote] if remote else []
    with handed_over(root) as options:
        run_logged(dvc(*options, "push", *args, *stages), root, get_run_logger(), tool_env(), tail_lines,
                   what="dvc push")


@task(name="promote")
def promote(root: str, env: dict[str, str], tail_lines: int = 20) -> None:
    """``bert-pipeline promote`` (as ``python -m stages.cli promote``, this interpreter): register fine-tuned models
    and move the registry aliases."""
    run_logged([sys.executable, "-m", "stages.cli", "promote"], root, get_run_logger(), tool_env(env), tail_lines,
               what="bert-pipeline promote")


# -------------------------------------------------------------------------------------------------- glue
def read_orchestration(root: Path):
    """The ``orchestration`` section of ``root/params.yaml`` validated by the project's schema (defaults when
    the section is absent, as in a bare DVC repository)."""
    from stages.params.base import validate_as
    from stages.params.orchestration import OrchestrationView

    path = root / "params.yaml"
    raw = (yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None) or {}
    return validate_as(OrchestrationView, {"orchestration": raw.get("orchestration") or {}}, str(path)).orchestration


def _num_processes_key(stage: str) -> tuple[str, str]:
    """(the ``params.yaml`` DVC reads for ``stage``, relative to the workspace; the stage's params section): the
    file beside the stage's ``dvc.yaml``, the section named after the stage (``finetune`` for ``finetune@x``)."""
    rel, _, name = stage.rpartition(":")
    folder = Path(rel).parent if rel else Path()
    return (folder / "params.yaml").as_posix(), name.partition("@")[0]


def devices_needed(root: Path, stages: Iterable[str]) -> dict[str, int]:
    """Devices each of ``stages`` (the GPU stages) needs: its params section's ``compute.num_processes`` (one
    process per device, as ``accelerate launch`` starts them) when the section has it, else 1.

    Read from the workspace's ``params.yaml`` (a clone's has its overrides applied), as :func:`read_orchestration`.

    Raises:
        PipelineError: a ``compute.num_processes`` that is not an integer >= 1.
    """
    loaded: dict[str, dict[str, Any]] = {}
    needed: dict[str, int] = {}
    for stage in stages:
        file, section = _num_processes_key(stage)
        if file not in loaded:
            path = root / file
            loaded[file] = (yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None) or {}
        params = loaded[file].get(section)
        compute = params.get("compute") if isinstance(params, dict) else None
        count = compute.get("num_processes", 1) if isinstance(compute, dict) else 1
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise PipelineError(f"{file}: {section}.compute.num_processes: expected an integer >= 1, got {count!r}; "
                                "set it to the number of processes (one per GPU)")
        needed[stage] = count
    return needed


def refuse_too_many(needed: dict[str, int], devices: list[str], source: str) -> None:
    """Refuse, in one line, a stage that needs more devices (``needed``, from :func:`devices_needed`) than this
    machine has (``devices``; ``source`` says where their number came from). Nothing is refused without devices:
    GPU stages then run on the CPU (several processes as DDP on gloo).

    Raises:
        PipelineError: the first such stage, naming its ``compute.num_processes`` key and the fix.
    """
    if not devices:
        return
    for stage, count in needed.items():
        if count > len(devices):
            file, section = _num_processes_key(stage)
            raise PipelineError(f"{file}: {section}.compute.num_processes: {count} processes need {count} GPUs, this "
                                f"machine has {len(devices)} ({source}); lower it or run on a machine with {count} GPUs")


def collect_overrides(root: Path, profile: str | None, set_params: list[str] | None) -> list[str]:
    """``key=value`` overrides: the profile's (``profiles/NAME.yaml``) first, then ``set_params``.

    In the project (``stages/params/root.py`` present) the merged params are validated before anything runs.

    Raises:
        PipelineError: unknown profile. ParamsError: an override the schema rejects (one line naming the key).
    """
    from stages.cli import load_profile, set_param_args, set_param_values

    overrides: list[str] = []
    from_profile = load_profile(profile, root / "profiles") if profile else {}
    params = root / "params.yaml"
    base = (yaml.safe_load(params.read_text(encoding="utf-8")) or {}) if params.is_file() else None
    overrides += set_param_args(from_profile, base)[1::2]  # a key params.yaml lacks: ++key (Hydra adds it)
    for item in set_params or []:
        if "=" not in item:
            raise ValueError(f"--set-param {item!r}: expected key=value")
        overrides.append(item)
    if overrides and (root / "stages" / "params" / "root.py").exists():
        from stages.params.root import load_params

        # values parsed as DVC parses them (Hydra's grammar: 2e-3 is a float); an error names the value's origin
        given = set_param_values([arg for item in set_params or [] for arg in ("-S", item)])
        origins = {**dict.fromkeys(from_profile, f"profiles/{profile}.yaml"), **dict.fromkeys(given, "--set-param")}
        load_params(root / "params.yaml", {**from_profile, **given}, origins)
    return overrides


def gpu_devices(gpus: int | None) -> list[str]:
    """Device ids GPU stages may use: ``range(gpus)`` when given, else ``$CUDA_VISIBLE_DEVICES``, else one per
    ``nvidia-smi -L`` line (none without a GPU: GPU stages then run on the CPU)."""
    if gpus is not None:
        return [str(i) for i in range(gpus)]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d for d in visible.split(",") if d.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def ensure_gpu_limit(count: int, logger) -> None:
    """Create the ``gpu`` tag concurrency limit at ``count`` (this machine's GPUs) when the server has none."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            limit = client.read_concurrency_limit_by_tag("gpu").concurrency_limit
        except ObjectNotFound:
            client.create_concurrency_limit(tag="gpu", concurrency_limit=count)
            logger.info("created the `gpu` task concurrency limit: %d", count)
            return
    if limit != count:
        logger.warning("`gpu` concurrency limit is %d, this machine has %d GPUs", limit, count)


def _error_text(future) -> tuple[str, list[str]]:
    """(one-line reason, last output lines) of a failed task future."""
    try:
        future.result()
    except CommandFailed as exc:
        return str(exc).splitlines()[0], exc.tail
    except Exception as exc:  # noqa: BLE001 - any task failure is reported, not re-raised here
        lines = str(exc).splitlines() or [type(exc).__name__]
        return lines[0], lines[1:]
    return "failed", []


def _schedule(graph: StageGraph, needs: set[str], slots: list[str | None], devices: list[str],
              submit, submit_blocked, logger, outcome: dict[str, dict[str, Any]],
              needed: dict[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """Run the graph: a stage starts when all its upstream stages succeeded and a slot (workspace or worker
    clone) and, for a GPU stage, as many free devices as it needs (``needed``, stage -> count, default 1) are
    free; dependents of a failed stage are failed without running. A stage's devices return when it ends.

    ``submit(stage, slot, device, runs, upstream_futures)`` returns a Prefect future (``device``: its device ids
    joined by commas, for ``CUDA_VISIBLE_DEVICES``; ``None`` for a CPU stage or without devices);
    ``submit_blocked(stage, failed, upstream_futures)`` likewise. ``outcome`` (stage -> task result) is filled in
    as stages finish.
    """
    done: queue.Queue[str] = queue.Queue()
    futures: dict[str, Any] = {}
    holding: dict[str, tuple[str | None, list[str]]] = {}
    free_slots, free_devices = list(slots), list(devices)
    needed = needed or {}
    pending = list(graph.order)
    while pending or holding:
        for stage in list(pending):
            ups = graph.upstream[stage]
            bad = [u for u in ups if u in outcome and outcome[u]["status"] in ("failed", "blocked")]
            if bad:
                pending.remove(stage)
                futures[stage] = submit_blocked(stage, bad, [allow_failure(futures[u]) for u in ups])
                outcome[stage] = {"stage": stage, "status": "blocked", "error": f"upstream {', '.join(bad)} failed"}
                try:
                    futures[stage].wait()
                except Exception:  # noqa: BLE001 - the blocked task fails by design
                    pass
                logger.warning("%s: not run, upstream stage %s failed", stage, ", ".join(bad))
                continue
            if not all(u in outcome and outcome[u]["status"] not in ("failed", "blocked") for u in ups):
                continue
            runs = stage in needs
            taken: list[str] = []
            if runs:
                if not free_slots:
                    continue
                if stage in graph.gpu and devices:
                    count = needed.get(stage, 1)
                    if len(free_devices) < count:  # all of them at once: a partial hold could deadlock two stages
                        continue
                    taken, free_devices = free_devices[:count], free_devices[count:]
                slot = free_slots.pop(0)
            else:
                slot = None
            pending.remove(stage)
            fut = submit(stage, slot, ",".join(taken) if taken else None, runs, [futures[u] for u in ups])
            futures[stage] = fut
            holding[stage] = (slot, taken)  # a skipped stage holds no slot (None): it runs no subprocess
            fut.add_done_callback(lambda _f, s=stage: done.put(s))
        if not holding:
            if pending:  # cannot happen for a DAG; guard against a silent hang
                raise RuntimeError(f"no runnable stage among {pending}")
            break
        stage = done.get()
        slot, taken = holding.pop(stage)
        if slot is not None:
            free_slots.append(slot)
        # kept in the machine's order, so that a later stage gets neighbouring ids ("0,1") again
        free_devices = [d for d in devices if d in free_devices or d in taken]
        _record(stage, futures[stage], outcome, logger)
    return outcome


def _record(stage: str, future, outcome: dict[str, dict[str, Any]], logger) -> None:
    future.wait()  # the final state comes from the finished future, not from the API (recorded asynchronously)
    state = future.state
    if state.is_completed():
        outcome[stage] = future.result()
        logger.info("%s: %s", stage, outcome[stage]["status"])
    else:
        reason, tail = _error_text(future)
        outcome[stage] = {"stage": stage, "status": "failed", "error": reason, "tail": tail}
        logger.error("%s failed: %s", stage, reason)


def summary_table(outcome: dict[str, dict[str, Any]], order: list[str]) -> str:
    """Markdown table: stage, status, seconds."""
    rows = ["| stage | status | seconds |", "| --- | --- | --- |"]
    for stage in order:
        o = outcome.get(stage, {"status": "not selected"})
        rows.append(f"| {stage} | {o['status']} | {o.get('seconds', '')} |")
    return "\n".join(rows)


def report_table(root: Path) -> str:
    """The first markdown table of ``reports/summary.md`` (empty when the report does not exist)."""
    path = root / "reports" / "summary.md"
    if not path.exists():
        return ""
    lines, started = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("|"):
            lines.append(line)
            started = True
        elif started:
            break
    return "\n".join(lines)


def _flow_run_id() -> str:
    from prefect.runtime import flow_run

    return str(flow_run.id or "")


def _flow_run_name() -> str:
    from prefect.runtime import flow_run

    return str(flow_run.name or time.strftime("%Y%m%d-%H%M%S"))


# --------------------------------------------------------------------------------------------------- flow
@flow(name="bert-pipeline")
def pipeline(
    stages: list[str] | None = None,
    profile: str | None = None,
    set_params: list[str] | None = None,
    push: bool = False,
    promote_models: bool = False,
    repo: str = ".",
    remote: str | None = None,
    workers: list[str] | None = None,
    git_url: str | None = None,
    gpus: int | None = None,
    experiment: str | None = None,
    track: bool | None = None,
) -> dict[str, Any]:
    """Run the DVC pipeline of ``repo``, one task per stage.

    Args:
        stages: stage addresses, foreach/matrix group names or globs (default: all); their upstream stages too.
        profile: name of a file in ``profiles/`` whose overrides apply (run becomes a DVC experiment).
        set_params: ``key=value`` overrides, as ``dvc exp run --set-param`` (run becomes a DVC experiment).
        push: ``dvc push`` the outputs to the DVC remote (workers always push; that is how they share data).
        promote_models: run ``bert-pipeline promote`` last (if the project has it); ignored with overrides.
        repo: the repository root.
        remote: DVC remote name (default: the repository's default remote).
        workers: clones that act as workers (a path each; independent stages run in parallel, data shared
            through the DVC remote); ``["task-worker"] * N`` sends stages to N Prefect task workers started
            with ``python -m flows.worker`` on other machines. Default: run in ``repo`` itself.
        git_url: where workers fetch the commit from (default: ``repo``; use a shared remote across machines).
        gpus: GPU count of this machine (default: ``$CUDA_VISIBLE_DEVICES`` or ``nvidia-smi -L``).
        experiment: DVC experiment name for a run with overrides (default: ``<profile>-<flow run name>``).
        track: open an MLflow parent run (default ``orchestration.mlflow``).

    Returns:
        ``{"ok", "stages": {stage: {"status", "seconds", ...}}, "workspace", "experiment", "mlflow_parent_run_id"}``.

    Raises:
        PipelineFailed: a stage failed; the message names it and ends with its last output lines.
    """
    logger = get_run_logger()
    started = time.monotonic()
    root = Path(repo).resolve()
    overrides = collect_overrides(root, profile, set_params)
    throwaway = bool(overrides) or bool(profile)
    if throwaway and promote_models:
        logger.warning("promote skipped: a run with a profile or overrides is a throwaway experiment")
        promote_models = False
    # the user's workspace is this run's alone until it ends: other DVC commands fail on DVC's lock
    workspace_lock = None if throwaway else WorkspaceLock(root)
    if workspace_lock is not None:
        workspace_lock.acquire()
    workspace = make_clone(root, overrides, logger) if throwaway else root
    flow_run_id = _flow_run_id()
    summary: dict[str, Any] = {"ok": False, "workspace": str(workspace), "experiment": None,
                               "mlflow_parent_run_id": None, "stages": {}}
    uri = parent = exp_id = None
    outcome: dict[str, dict[str, Any]] = {}
    try:
        orch = read_orchestration(workspace)
        with handed_over(workspace):  # DVC's API takes the lock itself
            graph = load_graph(workspace, orch.gpu_stages).select(stages)
            needs = graph.needs_run()
        logger.info("%d stages; out of date per dvc status: %s; may run: %s", len(graph.order),
                    sorted(graph.out_of_date) or "none", sorted(needs) or "none")
        devices = gpu_devices(gpus)
        # only the stages that may run hold devices: an up-to-date one is skipped whatever its count
        needed = devices_needed(workspace, [s for s in graph.order if s in graph.gpu and s in needs])
        refuse_too_many(needed, devices, "the flow's gpus argument" if gpus is not None
                        else "CUDA_VISIBLE_DEVICES / nvidia-smi")
        env: dict[str, str] = {}
        if track if track is not None else orch.mlflow:
            uri = tracking.tracking_uri(root)
            experiment_name = os.environ.get(tracking.EXPERIMENT_ENV, tracking.EXPERIMENT)
            parent, exp_id = tracking.open_parent_run(uri, experiment_name, f"pipeline {_flow_run_name()}", {
                "prefect_flow_run_id": flow_run_id, "git_rev": git_rev(workspace), "profile": profile or "",
                "overrides": " ".join(overrides)})
            summary["mlflow_parent_run_id"] = parent
            env = {tracking.PARENT_RUN_ENV: parent, tracking.FLOW_RUN_ENV: flow_run_id, "MLFLOW_TRACKING_URI": uri,
                   tracking.EXPERIMENT_ENV: experiment_name}
        retry = {"retries": orch.retries, "retry_delay_seconds": orch.retry_delay_seconds}
        if devices and graph.gpu:
            ensure_gpu_limit(len(devices), logger)
        rev = git_rev(workspace) if workers else ""
        source = git_url or str(workspace)

        def submit(stage, slot, device, runs, ups):
            stage_env = dict(env, **({"CUDA_VISIBLE_DEVICES": device} if device is not None else {}))
            tags = ["gpu"] if stage in graph.gpu else []
            if workers and runs:
                locks = {u: outcome[u]["lock"] for u in graph.upstream[stage]}
                task_fn = stage_on_worker.with_options(tags=tags, **retry)
                kwargs = dict(stage=stage, git_url=source, rev=rev, upstream_locks=locks, remote=remote,
                              set_params=overrides, env=stage_env, tail_lines=orch.log_tail_lines)
                if slot == "task-worker":
                    return task_fn.delay(**kwargs)
                return task_fn.submit(workdir=slot, wait_for=ups, **kwargs)
            return run_stage.with_options(tags=tags, **retry).submit(
                stage, str(workspace), runs, stage_env, orch.log_tail_lines, wait_for=ups)

        def submit_blocked(stage, failed, ups):
            return stage_blocked.submit(stage, failed, wait_for=ups)

        slots: list[str | None] = list(workers) if workers else [str(workspace)]
        _schedule(graph, needs, slots, devices, submit, submit_blocked, logger, outcome, needed)
        failed = [s for s in graph.order if outcome[s]["status"] == "failed"]
        if workers:  # the coordinator's workspace ends with the complete dvc.lock
            merge_lock(workspace, {s: o["lock"] for s, o in outcome.items() if o.get("lock")})
        if not failed:
            if push and not workers:
                push_outputs(str(workspace), graph.order, remote, orch.log_tail_lines)
            if throwaway:
                if workers:
                    run_logged(dvc("pull", "-q", *(["-r", remote] if remote else [])), workspace, logger)
                summary["experiment"] = save_experiment(
                    workspace, experiment or f"{profile or 'overrides'}-{_flow_run_name()}", logger)
            if promote_models:
                if (workspace / "stages" / "cli.py").exists():
                    promote(str(workspace), env, orch.log_tail_lines)
                else:
                    logger.warning("promote requested but stages/cli.py does not exist: skipped")
        summary["ok"] = not failed
        if not throwaway and any(o["status"] in ("ran", "restored") for o in outcome.values()):
            logger.info(GIT_ADVICE_ONCE)
    finally:
        summary["stages"] = {s: {k: v for k, v in o.items() if k != "lock"} for s, o in outcome.items()}
        summary["seconds"] = round(time.monotonic() - started, 3)
        if parent:
            ran = sum(o["status"] == "ran" for o in outcome.values())
            tracking.close_parent_run(uri, parent, summary["ok"], {"stages_ran": ran})
        _publish(summary, outcome, workspace, uri, parent, exp_id, logger)
        if throwaway:
            remove_clone(workspace)
        if workspace_lock is not None:
            workspace_lock.release()
    if not summary["ok"]:
        first = failed[0]
        tail = "\n".join(outcome[first].get("tail") or [])
        raise PipelineFailed(f"stage {first} failed: {outcome[first]['error']}"
                             + (f" (also failed: {', '.join(failed[1:])})" if failed[1:] else "")
                             + (f"\n{tail}" if tail else ""), summary)
    return summary


def _publish(summary, outcome, workspace: Path, uri, parent, exp_id, logger) -> None:
    """Markdown artifact ``bert-pipeline-summary``: stage table, ``reports/summary.md``'s table, MLflow links."""
    parts = ["# BERT pipeline run", "", summary_table(outcome, list(outcome)), ""]
    if summary.get("experiment"):
        parts += [f"DVC experiment: `{summary['experiment']}` (`dvc exp show`, `dvc exp apply`)", ""]
    table = report_table(workspace)
    if table:
        parts += ["## reports/summary.md", "", table, ""]
    if parent:
        parts += ["## MLflow", "", f"- the family's runs: {tracking.experiment_link(uri, exp_id)}",
                  f"- parent run: {tracking.run_link(uri, exp_id, parent)}"]
        try:
            for run in tracking.child_runs(uri, parent):
                parts.append(f"- {run['stage'] or run['name']}: {tracking.run_link(uri, run['experiment_id'], run['run_id'])}")
        except Exception as exc:  # noqa: BLE001 - a tracking hiccup must not hide the run's outcome
            logger.warning("MLflow child runs not listed: %s", exc)
    try:
        create_markdown_artifact(markdown="\n".join(parts), key="bert-pipeline-summary",
                                 description="stages, report table and MLflow runs of this flow run")
    except Exception as exc:  # noqa: BLE001
        logger.warning("summary artifact not published: %s", exc)


# ---------------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stages", nargs="+", help="stages (and their upstream) to run; default all")
    parser.add_argument("--set-param", "-S", action="append", default=[], metavar="KEY=VALUE",
                        help="params override, as dvc exp run --set-param (repeatable)")
    parser.add_argument("--profile", help="a profile in profiles/ (run as a DVC experiment)")
    parser.add_argument("--push", action="store_true", help="dvc push outputs to the DVC remote")
    parser.add_argument("--promote", action="store_true", help="run bert-pipeline promote last (not with overrides)")
    parser.add_argument("--remote", help="DVC remote name")
    parser.add_argument("--repo", default=".", help="repository root (default: the current directory)")
    parser.add_argument("--worker", action="append", dest="workers", metavar="DIR",
                        help="a worker clone (repeatable; independent stages run in parallel)")
    parser.add_argument("--name", help="DVC experiment name for a run with overrides")
    parser.add_argument("--no-mlflow", action="store_true", help="do not open an MLflow parent run")
    args = parser.parse_args(argv)
    try:
        overrides = collect_overrides(Path(args.repo).resolve(), args.profile, args.set_param)  # before Prefect starts
        if not overrides and not args.profile:  # a busy workspace is refused in one line before Prefect starts
            with WorkspaceLock(args.repo):
                pass
        result = pipeline(stages=args.stages, profile=args.profile, set_params=args.set_param, push=args.push,
                          promote_models=args.promote, repo=args.repo, remote=args.remote, workers=args.workers,
                          experiment=args.name, track=False if args.no_mlflow else None)
    except (PipelineFailed, PipelineError, ParamsError, KeyError, ValueError) as exc:
        sys.stderr.write(f"error: {str(exc).strip(chr(39))}\n")
        return 1
    sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
