"""The one runtime (bert_pipeline/train/runtime.py): fp16 loss scaling that trains on after overflows, model and
optimizer prepared together, the teacher moving with the student, the host-side masked positions, speed
measurements on the runtime's device, and no stage or library module choosing a device or precision of its own."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from bert_pipeline.model.configs import new_pretraining_model
from bert_pipeline.model.distillation import DistillationModel, build_student
from bert_pipeline.model.objectives import MaskedPositionPretrainer, masked_lm_forward
from bert_pipeline.train import finetune_loop
from bert_pipeline.train.loop import Phase, TrainConfig, masked_positions, train
from bert_pipeline.train.runtime import Runtime, RuntimeSettingError, cpu_dropout, make_runtime
from tests.conftest import REPO
from tests.pretrain_fixtures import make_dataset, pad_collate, tiny_config

HUGE_SCALE = 2.0**40  # fp16's largest finite value is 65504 (2^16): every early scaled gradient overflows


def phases(steps: int, n_train: int = 64, seq: int = 32) -> list[Phase]:
    return [Phase("p", 0, steps, make_dataset(n_train, seed=1, max_seq_length=seq),
                  make_dataset(16, seed=2, max_seq_length=seq), batch_size=8, max_seq_length=seq)]


def _fp16_runtime(init_scale: float = HUGE_SCALE) -> Runtime:
    runtime = make_runtime("fp16", cpu=True)
    assert runtime.precision == "fp16" and runtime.scaler is not None
    runtime.loss_scale_init = init_scale  # forced overflows: every training run starts a scaler at this scale
    return runtime


# ------------------------------------------------------------------------------------------- fp16 scaling
def test_fp16_training_goes_on_after_the_scaler_skips_overflowing_steps():
    """Bug 1 of issue 36: a skipped fp16 step never reached ``scaler.update()``, so the next unscale raised. Under a
    scaler every step is the scaler's decision: the first steps overflow and are skipped (the scale halves each
    time), then training goes on and the weights move."""
    torch.manual_seed(0)
    model = MaskedPositionPretrainer(new_pretraining_model(tiny_config(), with_pair_head=True, seed=0))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    runtime = _fp16_runtime()
    steps = 40
    cfg = TrainConfig(max_steps=steps, learning_rate=1e-3, warmup_steps=0, eval_steps=0, logging_steps=10,
                      max_bad_steps=0)  # a skip under the scaler is no bad step
    result = train(model, phases(steps), pad_collate, cfg, runtime)
    assert 1 <= result.scaler_skipped_steps < steps, result.scaler_skipped_steps
    assert result.bad_steps == 0
    assert runtime.scaler.get_scale() < HUGE_SCALE
    assert all(math.isfinite(r["train_loss"]) for r in result.history if "train_loss" in r)
    changed = [k for k, v in model.state_dict().items() if v.is_floating_point() and not torch.equal(before[k], v)]
    assert changed, "no update was applied after the skipped steps"
    assert all(torch.isfinite(v).all() for v in model.state_dict().values() if v.is_floating_point())


def _classifier(seed: int):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    return BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                    num_attention_heads=2, intermediate_size=32, num_labels=2))


def _fit(model, runtime: Runtime, seed: int = 0):
    features = [{"input_ids": [1, 5 + i % 7, 9 + i % 3, 2], "label": i % 2} for i in range(32)]

    def collate(rows):
        return {"input_ids": torch.tensor([r["input_ids"] for r in rows]),
                "labels": torch.tensor([r["label"] for r in rows])}

    settings = finetune_loop.TrainSettings(learning_rate=1e-3, epochs=6, batch_size=8, evals_per_epoch=1, seed=seed)
    return finetune_loop.fit(model, features, collate, settings, lambda _m: {"accuracy": 0.5}, "accuracy", runtime)


def test_fp16_fine_tuning_trains_with_the_scaler_instead_of_being_refused():
    """``finetune.precision: fp16`` was refused (no scaler in fine-tuning); now fit() scales the loss."""
    result = _fit(_classifier(0), _fp16_runtime(2.0**30))
    assert result.steps == 24
    assert 1 <= result.scaler_skipped_steps < result.steps


def test_each_training_run_starts_its_own_loss_scale():
    """A stage fine-tunes several seeds and grid settings on one runtime: seed 1 after seed 0 must train as seed 1
    alone (the scale where seed 0 ended is not seed 1's start)."""
    shared = _fp16_runtime(2.0**30)
    _fit(_classifier(0), shared, seed=0)
    after, alone = _classifier(1), _classifier(1)
    first = _fit(after, shared, seed=1)
    second = _fit(alone, _fp16_runtime(2.0**30), seed=1)
    assert first.scaler_skipped_steps == second.scaler_skipped_steps >= 1
    for (name, a), b in zip(after.state_dict().items(), alone.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_a_collapsed_fp16_scale_is_a_one_line_error():
    """Gradients that stay non-finite at any scale are divergence, not an fp16 overflow: the loss scale falls below
    MIN_LOSS_SCALE and the loop stops with a line naming the key."""
    model = MaskedPositionPretrainer(new_pretraining_model(tiny_config(), with_pair_head=True, seed=0))

    class Diverged(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, **batch):
            out = self.inner(**batch)
            out.loss = out.loss * float("inf")
            return out

    runtime = _fp16_runtime(4.0)
    cfg = TrainConfig(max_steps=10, learning_rate=1e-3, warmup_steps=0, eval_steps=0, logging_steps=10)
    with pytest.raises(Exception, match=r"^pretrain\.precision: the fp16 loss scale fell to") as err:
        train(Diverged(), phases(10), pad_collate, cfg, runtime)
    assert "\n" not in str(err.value)


def test_fp16_under_fsdp_is_refused_in_one_line_and_auto_never_picks_it(monkeypatch):
    from bert_pipeline.train import runtime as runtime_module

    class FakeFsdp:
        device = torch.device("cuda")
        distributed_type = "FSDP"

    with pytest.raises(RuntimeSettingError, match="^precision: fp16 under FSDP is not supported"):
        Runtime(FakeFsdp(), "fp16")
    monkeypatch.setattr(runtime_module, "cuda_has_native_bf16", lambda: False)  # a V100 under FSDP
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32  # a "cuda" runtime sets them
    try:
        assert Runtime(FakeFsdp(), "auto").precision == "fp32"
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


# --------------------------------------------------------------------------------------- prepare together
def test_the_loop_prepares_model_and_optimizer_together():
    """Bug 3: FSDP2 needs model and optimizer in one ``prepare`` call (it swaps the optimizer's parameters for the
    sharded ones); the loop used to prepare the model alone and build the optimizer on the wrapped model."""
    calls = []

    class Spy(Runtime):
        def prepare(self, model, optimizer):
            calls.append((model, optimizer))
            return super().prepare(model, optimizer)

    runtime = make_runtime("fp32", cpu=True)
    spy = Spy(runtime.accelerator, "fp32")
    model = MaskedPositionPretrainer(new_pretraining_model(tiny_config(), with_pair_head=True, seed=0))
    cfg = TrainConfig(max_steps=2, learning_rate=1e-3, warmup_steps=0, eval_steps=0, logging_steps=1)
    train(model, phases(2), pad_collate, cfg, spy)
    assert len(calls) == 1
    prepared_model, optimizer = calls[0]
    assert prepared_model is model
    optimised = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert optimised == {id(p) for p in model.parameters() if p.requires_grad}


# ----------------------------------------------------------------------------------------- the teacher
def test_the_teacher_moves_with_the_student():
    """Bug 5: the teacher (not a submodule) followed the inputs' device only in ``forward``; a resumed run that
    evaluates without a training step met a teacher on the CPU. ``.to()`` (what accelerate's prepare calls) now
    moves it with the student: shown with the ``meta`` device and with a dtype."""
    teacher = new_pretraining_model(tiny_config(num_hidden_layers=4), with_pair_head=True, seed=0)
    student, _ = build_student(teacher, 2)
    model = DistillationModel(student, teacher, temperature=2.0, alpha_ce=5.0, alpha_mlm=2.0, alpha_cos=1.0)
    model.to(torch.float64)
    assert {p.dtype for p in model.teacher.parameters()} == {torch.float64}
    model.to("meta")
    assert {p.device.type for p in model.teacher.parameters()} == {"meta"}
    assert {p.device.type for p in model.student.parameters()} == {"meta"}
    assert not list(model.teacher.parameters())[0].requires_grad  # still frozen
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in student.parameters())


def distill_three_steps(checkpoint_dir: Path, runtime: Runtime):
    """A 4-layer teacher distilled into 2 layers for 3 steps, checkpointed at the end (a rerun with the same folder
    resumes at the final step and trains nothing). Returns ``(outcome, teacher)``; shared with tests/test_gpu.py."""
    from bert_pipeline.train.checkpoint import CheckpointManager
    from bert_pipeline.train.distill import run_distillation

    teacher = new_pretraining_model(tiny_config(num_hidden_layers=4, max_position_embeddings=128),
                                    with_pair_head=True, seed=0)
    cfg = TrainConfig(max_steps=3, learning_rate=1e-3, warmup_steps=0, eval_steps=0, logging_steps=1, save_steps=3,
                      stage="distill", eval_batch_size=8)
    outcome = run_distillation(
        teacher, 2, make_dataset(48, seed=1), make_dataset(16, seed=2), pad_collate, config=cfg, runtime=runtime,
        checkpoints=CheckpointManager(checkpoint_dir, "fp", keep=1), batch_size=8, max_seq_length=32,
        loss={"temperature": 2.0, "alpha_ce": 5.0, "alpha_mlm": 2.0, "alpha_cos": 1.0, "cos_positions": "tokens"},
        final_eval_batches=None, throughput_runs=1, throughput_warmup=0)
    return outcome, teacher


def test_a_distill_resume_at_the_final_step_evaluates_teacher_and_student_on_one_device(tmp_path):
    """The whole path of bug 5 on the CPU: train to the end with checkpoints, run again (resumes at the final
    step, trains nothing), and the held-out comparison reads both models on the runtime's device."""
    (first, _), (again, teacher) = (distill_three_steps(tmp_path / "ck", make_runtime("fp32", cpu=True))
                                    for _ in range(2))
    assert again.timing["resumed_from_step"] == 3
    assert again.metrics["student"]["mlm_accuracy"] == first.metrics["student"]["mlm_accuracy"]
    assert again.metrics["teacher"]["mlm_accuracy"] == first.metrics["teacher"]["mlm_accuracy"]
    assert again.timing["device"] == "cpu" and again.timing["teacher"]["device"] == "cpu"
    assert next(teacher.parameters()).device == next(again.student.parameters()).device


# ------------------------------------------------------------------------------------- host synchronisation
def test_host_side_masked_positions_give_the_same_logits_as_the_boolean_mask():
    torch.manual_seed(0)
    model = new_pretraining_model(tiny_config(), with_pair_head=True, seed=0).eval()
    batch = pad_collate([make_dataset(6, seed=3)[i] for i in range(6)])
    plain = masked_lm_forward(model, batch["input_ids"], batch["labels"], batch["attention_mask"],
                              batch["token_type_ids"])
    hosted = masked_lm_forward(model, batch["input_ids"], batch["labels"], batch["attention_mask"],
                               batch["token_type_ids"], masked_positions(batch["labels"]))
    assert plain[0].shape[0] == int((batch["labels"] != -100).sum()) > 0
    torch.testing.assert_close(hosted[0], plain[0], rtol=0, atol=0)
    assert torch.equal(hosted[2], plain[2])


# ------------------------------------------------------------------------------------------ speed devices
def test_throughput_runs_on_the_runtime_device_and_records_it():
    """Bug 4: ``variants`` timed encoders left on the GPU with inputs built on the CPU. Every speed measurement
    places the models and builds the inputs on the runtime's device and says which."""
    from bert_pipeline.evaluation.speed import measure_throughput

    placed, moved = [], []

    class Spy(Runtime):
        def place(self, model):
            placed.append(model)
            return super().place(model)

        def to_device(self, batch):
            moved.append(sorted(batch))
            return super().to_device(batch)

    runtime = make_runtime("fp32", cpu=True)
    spy = Spy(runtime.accelerator, "fp32")
    a = new_pretraining_model(tiny_config(), with_pair_head=False, seed=0).base_model
    b = new_pretraining_model(tiny_config(num_hidden_layers=1), with_pair_head=False, seed=0).base_model
    out = measure_throughput({"a": a, "b": b}, spy, batch_size=2, seq_len=8, warmup=0, runs=1)
    assert placed == [a, b]
    assert moved == [["attention_mask", "input_ids", "token_type_ids"]]
    assert out["a"]["device"] == out["b"]["device"] == "cpu"


# ---------------------------------------------------------------------------------------------- one home
DEVICE_POLICY = re.compile(
    r"torch\.cuda\.is_available\(|torch\.autocast\(|Accelerator\(|GradScaler\(|is_bf16_supported|"
    r"\.to\(\s*[\"'](?:cpu|cuda)[\"']|\.cuda\(\)|torch\.device\(\s*[\"']cuda")
# where a device or precision is allowed to be chosen: the runtime itself, provenance facts (the GPU's name in the
# run record), the flow's device list (it assigns devices; it does not pick one for a model)
ALLOWED = {"bert_pipeline/train/runtime.py", "bert_pipeline/report/provenance.py"}


def test_no_module_chooses_a_device_or_precision_of_its_own():
    """Every stage that trains or infers goes through the one runtime: no other library or stage module asks for
    CUDA, builds an Accelerator, a GradScaler or an autocast context, or moves a model to a named device."""
    offenders = []
    for folder in ("bert_pipeline", "stages"):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel in ALLOWED:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                code = line.split("#", 1)[0]
                if DEVICE_POLICY.search(code) and "``" not in code:
                    offenders.append(f"{rel}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_policy_check_catches_a_private_device_choice():
    assert DEVICE_POLICY.search('device = torch.device("cuda" if torch.cuda.is_available() else "cpu")')
    assert DEVICE_POLICY.search('student = student.to("cpu", dtype=torch.float32)')
    assert DEVICE_POLICY.search("with torch.autocast(device.type, dtype=torch.bfloat16):")
    assert not DEVICE_POLICY.search("batch = runtime.to_device(batch)")


def test_every_training_stage_builds_the_shared_runtime():
    """The stages that train or infer on a GPU worker (orchestration.gpu_stages) each make the runtime through
    make_runtime, the only factory: in their own module or in the shared training glue under ``stages/`` that they
    import (``stages/members.py`` for fine-tuning)."""
    from tests.test_dvc_deps import import_closure

    for name in ("pretrain", "distill", "finetune", "teacher_logits", "distill_task", "retrieval", "budget_curve",
                 "variants", "export"):
        own = [path for path in import_closure(f"stages.{name}") if path.startswith("stages/")]
        assert any("make_runtime(" in (REPO / path).read_text(encoding="utf-8") for path in own), name


# ------------------------------------------------------------------------------------------------ FSDP2 step
def _fsdp_step_worker(rank: int, port: int, out: Path) -> None:
    """One of two gloo processes: a ``fully_shard`` model, then Runtime.step with accelerate's own FSDP2 clipping
    (accelerate runs no FSDP on a CPU, so its accelerator is stood in for by what the step reads of it)."""
    import json
    import os
    import types

    import torch.distributed as dist
    from accelerate import Accelerator
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        accelerator = types.SimpleNamespace(
            device=torch.device("cpu"), distributed_type="FSDP", num_processes=2, process_index=rank,
            is_main_process=rank == 0,
            clip_grad_norm_=lambda params, max_norm: Accelerator._clip_grad_norm_dtensor_aware(None, list(params),
                                                                                                  max_norm),
            reduce=lambda tensor, reduction: (dist.all_reduce(tensor), tensor)[1])
        runtime = Runtime(accelerator, "fp32")
        torch.manual_seed(rank)
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        outcome = runtime.step(model, optimizer, 1.0, torch.isfinite(loss.detach()))
        result = {"applied": outcome.applied, "grad_norm": outcome.grad_norm}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        result = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}
    finally:
        dist.destroy_process_group()
    (out / f"rank{rank}.json").write_text(json.dumps(result))


def test_an_fsdp2_step_reads_the_sharded_gradient_norm(tmp_path):
    """FSDP2's clipped norm is a replicated DTensor, which neither a collective nor ``tolist`` takes: the step
    must use its full tensor (it raised on the first step of every FSDP run)."""
    import json
    import multiprocessing
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_fsdp_step_worker, args=(rank, port, tmp_path)) for rank in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert all("error" not in r for r in results), results
    assert results[0] == results[1]  # one global norm, one decision on both ranks
    assert results[0]["applied"] is True and math.isfinite(results[0]["grad_norm"]) and results[0]["grad_norm"] > 0


# ------------------------------------------------------------------------------------- CPU training forwards
def test_cpu_dropout_drops_p_of_the_values_and_scales_the_rest():
    torch.manual_seed(0)
    values = torch.ones(400_001, dtype=torch.bfloat16)
    out = cpu_dropout(values, 0.1)
    assert out.dtype == torch.bfloat16 and out.shape == values.shape
    dropped = (out == 0).float().mean().item()
    assert abs(dropped - 0.1) < 0.003  # 400k draws: the standard error is 0.0005
    assert torch.allclose(out[out != 0].float(), torch.tensor(1 / 0.9), rtol=1e-2)
    assert abs(out.float().mean().item() - 1.0) < 0.01  # inverted dropout keeps the expectation
    for p in (0.25, 0.5):
        share = (cpu_dropout(torch.ones(200_000), p) == 0).float().mean().item()
        assert abs(share - p) < 0.005, p


def test_cpu_dropout_repeats_under_a_seed_and_is_the_identity_outside_training():
    values = torch.randn(7, 33)
    torch.manual_seed(3)
    first = cpu_dropout(values, 0.3)
    torch.manual_seed(3)
    assert torch.equal(first, cpu_dropout(values, 0.3))
    assert not torch.equal(first, cpu_dropout(values, 0.3))  # the generator moved on
    assert cpu_dropout(values, 0.3, training=False) is values
    assert cpu_dropout(values, 0.0) is values
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        cpu_dropout(values, 1.0)


def test_cpu_dropout_gradient_is_its_mask_times_the_scale():
    values = torch.ones(4, 50, requires_grad=True)
    torch.manual_seed(1)
    out = cpu_dropout(values, 0.5)
    out.sum().backward()
    assert torch.equal(values.grad, out.detach())  # kept: 2.0 both ways; dropped: 0.0


def test_train_forward_swaps_dropout_and_attention_only_inside_a_training_forward():
    """On a CPU a training forward runs eager attention with :func:`cpu_dropout`; evaluation and the saved config
    keep SDPA and torch's dropout, and both are restored even when the forward raises."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, attn_implementation="sdpa")
    model = BertForSequenceClassification(config).train()
    runtime = make_runtime("fp32", cpu=True)
    original = torch.nn.functional.dropout
    seen = {}

    def spy(module, args, output):
        seen["attention"] = model.config._attn_implementation
        seen["dropout"] = torch.nn.functional.dropout

    handle = model.bert.encoder.layer[0].attention.register_forward_hook(spy)
    batch = {"input_ids": torch.randint(0, 64, (2, 9)), "labels": torch.tensor([0, 1])}
    with runtime.train_forward(model):
        loss = model(**batch).loss
    assert seen == {"attention": "eager", "dropout": cpu_dropout}
    assert torch.isfinite(loss)
    assert model.config._attn_implementation == "sdpa" and torch.nn.functional.dropout is original
    with pytest.raises(RuntimeError, match="boom"), runtime.train_forward(model):
        raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa" and torch.nn.functional.dropout is original
    model.eval()
    with runtime.train_forward(model):
        model(**batch)
    assert seen == {"attention": "sdpa", "dropout": original}
    handle.remove()


def test_eager_attention_with_cpu_dropout_matches_sdpa_when_nothing_is_dropped():
    """The switch changes only the dropout draws: with dropout off, a training forward's loss is SDPA's."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        attn_implementation="sdpa")
    model = BertForSequenceClassification(config).train()
    batch = {"input_ids": torch.randint(0, 64, (3, 11)), "attention_mask": torch.tensor([[1] * 11, [1] * 7 + [0] * 4,
             [1] * 5 + [0] * 6]), "labels": torch.tensor([0, 1, 1])}
    runtime = make_runtime("fp32", cpu=True)
    with runtime.train_forward(model):
        switched = model(**batch).loss
    assert torch.allclose(switched, model(**batch).loss, atol=1e-6)


def test_auto_on_a_gpu_without_native_bf16_is_fp16_and_no_gpu_profile_forces_a_precision(monkeypatch):
    """A V100 or T4 (compute capability 7.x) has no native bf16: ``auto`` gives fp16 with loss scaling there, bf16 on
    Ampere on, and the GPU profiles leave the choice to ``auto`` (issue 57, item 4)."""
    import yaml

    from bert_pipeline.train import runtime as rt

    def old_torch(*args, **kwargs):  # a torch without including_emulation: the capability decides
        raise TypeError("unexpected keyword argument 'including_emulation'")

    for capability, want in (((7, 0), "fp16"), ((7, 5), "fp16"), ((8, 0), "bf16"), ((9, 0), "bf16")):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, c=capability: c)
        # torch's own answer: emulated bf16 counts only when asked to
        monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                            lambda including_emulation=True, c=capability: c >= (8, 0) or including_emulation)
        assert rt.resolve_precision("auto", "cuda") == want, capability
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", old_torch)
        assert rt.resolve_precision("auto", "cuda") == want, capability
    assert rt.resolve_precision("bf16", "cuda") == "bf16"  # a precision a user names is kept
    forced = {}
    for path in sorted((REPO / "profiles").glob("gpu-*.yaml")):
        for section, body in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).items():
            if isinstance(body, dict) and body.get("precision", "auto") != "auto":
                forced[f"{path.name}: {section}.precision"] = body["precision"]
    assert not forced, f"a GPU profile forces a precision that a pre-Ampere GPU may lack: {forced}"
