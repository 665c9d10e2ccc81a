"""bert_pipeline.train.loop: learning, kill -9 and resume bit-identical, phases, non-finite steps, optimizers."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bert_pipeline.model.configs import new_pretraining_model
from bert_pipeline.model.objectives import MaskedPositionPretrainer
from bert_pipeline.train.loop import (
    Phase,
    TrainConfig,
    TrainingError,
    batch_indices,
    phase_boundaries,
    train,
)
from bert_pipeline.train.optim import (
    Lamb,
    make_optimizer,
    make_scheduler,
    parameter_groups,
    pretraining_head_parameters,
)
from bert_pipeline.train.runtime import make_runtime
from tests.conftest import REPO
from tests.pretrain_fixtures import FIRST_WORD, make_dataset, pad_collate, tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")


def _worker(out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "tests.pretrain_worker", str(out), *extra], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen) -> None:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]


def _kill_after_pause(out: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 300
    while not (out / "paused").exists():
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "final.safetensors").exists()


def _same_weights(a: Path, b: Path) -> None:
    wa, wb = load_file(a / "final.safetensors"), load_file(b / "final.safetensors")
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def test_sigkill_after_phase1_checkpoint_then_resume_into_phase2_is_bit_identical(tmp_path):
    """N=8 steps, two phases (seq 24 for steps 1-6, seq 48 for 7-8), checkpoint at N/2 = 4, killed in step 8.

    The rerun resumes from the phase-1 checkpoint, switches phase at the same step and ends with the same
    weights (bit for bit) and the same loss curve as the uninterrupted run.
    """
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    straight.mkdir()
    killed.mkdir()
    args = ("--steps", "8", "--phases", "0.75,0.25", "--save-steps", "4", "--accum", "2")
    victim = _worker(killed, *args, "--pause-after", "7")
    _finish(_worker(straight, *args))
    _kill_after_pause(killed, victim)
    assert sorted(p.name for p in (killed / "ck").iterdir()) == ["step-00000004"]
    _finish(_worker(killed, *args))
    _same_weights(straight, killed)
    a = json.loads((straight / "history.json").read_text())
    b = json.loads((killed / "history.json").read_text())
    assert a["resumed_from"] == 0
    assert b["resumed_from"] == 4
    assert a["history"] == b["history"]
    # tokens_seen counts from step 0 across the resume; the resumed run itself only consumed the later steps
    assert a["tokens_seen"] == b["tokens_seen"] == a["tokens_since_start"] > b["tokens_since_start"] > 0
    phases = {r["step"]: r["phase"] for r in b["history"] if "train_loss" in r}
    assert phases == {s: (0 if s <= 6 else 1) for s in range(1, 9)}
    evals = [r["step"] for r in b["history"] if "eval_mlm_loss" in r]
    assert evals == [4, 8]


def test_resume_past_the_first_epoch_trains_on_the_batches_an_uninterrupted_run_sees(tmp_path):
    """accelerate#2016's failure (wrong batches after resuming past epoch 1), checked here: 40 instances in global
    micro-batches of 4 with 2 accumulation steps are 5 optimizer steps per epoch; the checkpoint at step 6 is in the
    second epoch, the run is killed after step 7 and resumed. The resumed run collates exactly the batches the
    uninterrupted run collated from step 7 on, and ends with the same weights."""
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    straight.mkdir()
    killed.mkdir()
    args = ("--steps", "12", "--save-steps", "6", "--accum", "2", "--record-batches")
    victim = _worker(killed, *args, "--pause-after", "7")
    _finish(_worker(straight, *args))
    _kill_after_pause(killed, victim)
    assert sorted(p.name for p in (killed / "ck").iterdir()) == ["step-00000006"]
    (killed / "batches.txt").rename(killed / "before-kill.txt")
    _finish(_worker(killed, *args))
    _same_weights(straight, killed)
    whole = (straight / "batches.txt").read_text().split()
    before = (killed / "before-kill.txt").read_text().split()
    resumed = (killed / "batches.txt").read_text().split()
    assert json.loads((killed / "history.json").read_text())["resumed_from"] == 6
    assert 0 < len(resumed) < len(whole)
    assert resumed == whole[-len(resumed):]  # the batches of steps 7-12 (and the evaluations), in order
    assert before == whole[:len(before)]  # before the kill, the same batches too


def test_phase_boundaries():
    assert phase_boundaries(100, [0.9, 0.1]) == [(0, 90), (90, 100)]
    assert phase_boundaries(7, [1.0]) == [(0, 7)]
    assert phase_boundaries(10, [1, 1, 1]) == [(0, 3), (3, 7), (7, 10)]


def test_batch_indices_cover_epoch_without_repeats():
    seen = [i for b in range(5) for i in batch_indices(23, 4, seed=1, stream=0, batch_index=b)]
    assert len(set(seen)) == 20
    assert max(seen) < 23
    assert not (batch_indices(23, 4, 1, 0, 5) == batch_indices(23, 4, 1, 0, 0)).all()  # new epoch, new order
    with pytest.raises(TrainingError, match="fewer than one global batch"):
        batch_indices(3, 4, 1, 0, 0)


def _phases(n_train: int = 64, steps: int = 40, seq: int = 32):
    train_set = make_dataset(n_train, seed=1, max_seq_length=seq)
    valid = make_dataset(24, seed=2, max_seq_length=seq)
    return [Phase("p", 0, steps, train_set, valid, batch_size=8, max_seq_length=seq)]


def test_training_learns_the_synthetic_language():
    # initializer_range 0.1 lets an H=32 model leave the unigram plateau within ~100 steps
    model = MaskedPositionPretrainer(new_pretraining_model(tiny_config(initializer_range=0.1), True, seed=0))
    phases = [Phase("p", 0, 120, make_dataset(2000, seed=1), make_dataset(96, seed=2), batch_size=16,
                    max_seq_length=32)]
    cfg = TrainConfig(max_steps=120, learning_rate=1e-2, warmup_steps=10, eval_steps=40, logging_steps=20, seed=0,
                      eval_batch_size=24)
    result = train(model, phases, pad_collate, cfg, make_runtime("fp32", cpu=True), unigram_token_id=FIRST_WORD)
    losses = [r["train_loss"] for r in result.history if "train_loss" in r]
    assert len(losses) == 6
    assert losses[-1] < losses[0] - 1.0
    assert result.first_eval["step"] == 40
    assert result.final_eval["step"] == 120
    assert result.final_eval["eval_mlm_loss"] < result.first_eval["eval_mlm_loss"]
    assert result.final_eval["eval_mlm_accuracy"] > 1.5 * result.final_eval["eval_unigram_accuracy"], result.history
    assert result.final_eval["eval_perplexity"] == pytest.approx(math.exp(result.final_eval["eval_mlm_loss"]))
    assert 0.0 <= result.final_eval["eval_pair_accuracy"] <= 1.0
    assert 0 < result.predicted_tokens < result.tokens <= result.padded_tokens


def test_bf16_autocast_step_keeps_fp32_weights():
    model = MaskedPositionPretrainer(new_pretraining_model(tiny_config(), True, seed=0))
    cfg = TrainConfig(max_steps=2, learning_rate=1e-3, warmup_steps=0, eval_steps=0, logging_steps=1)
    result = train(model, _phases(steps=2), pad_collate, cfg, make_runtime("bf16", cpu=True))
    assert result.bad_steps == 0
    assert all(math.isfinite(r["train_loss"]) for r in result.history if "train_loss" in r)
    assert all(p.dtype == torch.float32 for p in model.parameters())


class _NaNEvery(torch.nn.Module):
    """Returns a NaN loss on the listed calls (1-based), the real loss otherwise."""

    def __init__(self, inner, bad_calls):
        super().__init__()
        self.inner, self.bad, self.calls = inner, set(bad_calls), 0

    def forward(self, **batch):
        out = self.inner(**batch)
        if self.training:
            self.calls += 1
            if self.calls in self.bad:
                out = dataclasses.replace(out, loss=out.loss * float("nan"))
        return out


def test_non_finite_steps_are_skipped_then_an_error():
    inner = MaskedPositionPretrainer(new_pretraining_model(tiny_config(), with_pair_head=True, seed=0))
    model = _NaNEvery(inner, bad_calls={2})
    before = {k: v.clone() for k, v in inner.state_dict().items()}
    cfg = TrainConfig(max_steps=3, learning_rate=1e-3, warmup_steps=0, eval_steps=0, logging_steps=1, max_bad_steps=1)
    result = train(model, _phases(steps=3), pad_collate, cfg, make_runtime("fp32", cpu=True))
    assert result.bad_steps == 1
    assert all(torch.isfinite(v).all() for v in inner.state_dict().values() if v.is_floating_point())
    assert any(not torch.equal(before[k], v) for k, v in inner.state_dict().items())
    model = _NaNEvery(inner, bad_calls={1, 2})
    with pytest.raises(TrainingError, match="max_bad_steps: 2 steps had a non-finite loss"):
        train(model, _phases(steps=3), pad_collate, cfg, make_runtime("fp32", cpu=True))


def test_no_weight_decay_on_bias_and_layernorm():
    model = new_pretraining_model(tiny_config(), with_pair_head=True, seed=0)
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all("bias" in names[id(p)] or "LayerNorm" in names[id(p)] for p in no_decay["params"])
    assert any("word_embeddings" in names[id(p)] for p in decay["params"])
    assert not any("bias" in names[id(p)] or "LayerNorm" in names[id(p)] for p in decay["params"])
    opt = make_optimizer(model, "adamw", 1e-3)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]


def test_schedule_without_head_steps_is_transformers_linear_warmup_exactly():
    from transformers import get_linear_schedule_with_warmup

    def rates(make):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
        sched = make(opt)
        out = []
        for _ in range(12):
            out.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        return out

    ours = rates(lambda opt: make_scheduler(opt, 3, 10))
    assert ours == rates(lambda opt: get_linear_schedule_with_warmup(opt, 3, 10))
    assert ours[:5] == [0.0, 0.5 / 3, 1.0 / 3, 0.5, 0.5 * 6 / 7] and ours[10:] == [0.0, 0.0]


def test_heads_get_their_own_rate_and_learn_alone_first():
    model = new_pretraining_model(tiny_config(), with_pair_head=True, seed=0)
    heads = pretraining_head_parameters(model)
    names = {id(p): n for n, p in model.named_parameters()}
    # the MLM transform, the MLM output bias and the NSP classifier; the decoder weight is the word embeddings
    assert sorted(names[id(p)] for p in heads) == sorted(n for n in names.values() if n.startswith("cls."))
    assert not any(p is model.bert.embeddings.word_embeddings.weight for p in heads)
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    opt = make_optimizer(model, "adamw", 1e-4, head=heads, head_lr=1e-2)
    assert [(g["head"], g["lr"], g["weight_decay"]) for g in opt.param_groups] == [
        (False, 1e-4, 0.01), (False, 1e-4, 0.0), (True, 1e-2, 0.01), (True, 1e-2, 0.0)]
    assert sum(len(g["params"]) for g in opt.param_groups[2:]) == len(heads)
    with pytest.raises(ValueError, match="head parameters are not among the model's trainable parameters"):
        parameter_groups(model, 0.01, head=[torch.nn.Parameter(torch.zeros(2))], head_lr=1e-2)

    wrapped = MaskedPositionPretrainer(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = TrainConfig(max_steps=6, learning_rate=1e-3, warmup_steps=1, eval_steps=0, logging_steps=1,
                      head_learning_rate=1e-2, head_only_steps=3)
    result = train(wrapped, _phases(steps=6)[:1], pad_collate, cfg, make_runtime("fp32", cpu=True),
                   checkpoints=None, head_parameters=heads)
    assert [r["learning_rate"] for r in result.history if "learning_rate" in r][:4] == [0.0, 0.0, 0.0, 1e-3]
    moved = {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert {n for n in moved if n.startswith("cls.")} == {n for n in before if n.startswith("cls.")}
    assert any(n.startswith("bert.encoder.") for n in moved)  # the encoder learns once its steps start

    model = new_pretraining_model(tiny_config(), with_pair_head=True, seed=0)
    cfg = TrainConfig(max_steps=3, learning_rate=1e-3, warmup_steps=1, eval_steps=0, logging_steps=1,
                      head_only_steps=3)
    train(MaskedPositionPretrainer(model), _phases(steps=3), pad_collate, cfg, make_runtime("fp32", cpu=True),
          head_parameters=pretraining_head_parameters(model))
    assert all(torch.equal(before[n], p.detach()) for n, p in model.named_parameters() if n.startswith("bert."))
    assert not torch.equal(before["cls.predictions.transform.dense.weight"],
                           model.cls.predictions.transform.dense.weight.detach())


def test_lamb_step_matches_algorithm():
    w = torch.nn.Parameter(torch.tensor([[3.0, 4.0]]))  # ||w|| = 5
    b = torch.nn.Parameter(torch.tensor([1.0]))
    opt = Lamb([{"params": [w], "weight_decay": 0.1, "adapt": True},
                {"params": [b], "weight_decay": 0.0, "adapt": False}], lr=0.1, eps=1e-6)
    w.grad = torch.tensor([[1.0, -2.0]])
    b.grad = torch.tensor([0.5])
    opt.step()
    # step 1: m_hat = g, v_hat = g^2 -> r = sign(g) (+ eps effects) + wd * w
    r = torch.tensor([[1.0, -1.0]]) + 0.1 * torch.tensor([[3.0, 4.0]])
    expected_w = torch.tensor([[3.0, 4.0]]) - 0.1 * (5.0 / r.norm()) * r
    torch.testing.assert_close(w.detach(), expected_w, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.detach(), torch.tensor([0.9]), rtol=1e-5, atol=1e-5)  # trust ratio 1


def test_lamb_step_reads_nothing_back_from_the_device(monkeypatch):
    """The trust ratio stays a tensor: no ``.item()``, ``float()`` or ``bool()`` of a parameter-sized result per
    tensor, each of which waits for the device (issue 57, item 3). Only the host step counter is read."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(8, 4)), torch.nn.Parameter(torch.zeros(3, 3)),
              torch.nn.Parameter(torch.randn(4))]
    opt = Lamb([{"params": params[:2], "weight_decay": 0.1, "adapt": True},
                {"params": params[2:], "weight_decay": 0.0, "adapt": False}], lr=0.1)
    for p in params:
        p.grad = torch.randn_like(p)
    params[1].grad.zero_()  # ||w|| = ||r|| = 0: the trust ratio is 1, still without a read
    reads = []
    for name in ("item", "__float__", "__bool__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name):
            if not any(self is state.get("step") for state in opt.state.values()):  # the counter lives on the host
                reads.append(_name)
            return _original(self, *args)
        monkeypatch.setattr(torch.Tensor, name, counted)
    opt.step()
    assert reads == []
    assert torch.equal(params[1].detach(), torch.zeros(3, 3))  # zero weight, zero update: unchanged


def test_auto_precision_is_bf16_only_on_cpus_with_native_bf16(monkeypatch):
    """bf16 autocast on a CPU without AVX512-BF16/AMX is emulated and several times slower than fp32."""
    from bert_pipeline.train import runtime

    monkeypatch.setattr(runtime, "cpu_has_fast_bf16", lambda: False)
    assert make_runtime("auto", cpu=True).precision == "fp32"
    monkeypatch.setattr(runtime, "cpu_has_fast_bf16", lambda: True)
    assert make_runtime("auto", cpu=True).precision == "bf16"
    assert make_runtime("fp32", cpu=True).precision == "fp32"


def test_native_bf16_that_is_slower_than_fp32_is_not_chosen(monkeypatch, tmp_path):
    """``auto`` on a CPU asks for native bf16 and for a bf16 matmul faster than an fp32 one: an AVX512-BF16 Xeon
    without AMX has the first and not the second (bf16 products at about half the fp32 rate)."""
    from bert_pipeline.train import runtime

    measure = runtime.matmul_seconds
    cache = tmp_path / "precision-auto.json"
    monkeypatch.setenv(runtime.PRECISION_CACHE_ENV, str(cache))

    def timings(bf16: float, fp32: float):
        return lambda dtype, **_: bf16 if dtype == torch.bfloat16 else fp32

    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)
    for (bf16, fp32), fast in (((0.013, 0.0067), False), ((0.003, 0.0067), True)):
        runtime.cpu_has_fast_bf16.cache_clear()
        cache.unlink(missing_ok=True)  # each case a machine measured for the first time
        monkeypatch.setattr(runtime, "matmul_seconds", timings(bf16, fp32))
        assert runtime.cpu_has_fast_bf16() is fast
        assert runtime.resolve_precision("auto", "cpu") == ("bf16" if fast else "fp32")
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: False)  # emulated: never timed
    monkeypatch.setattr(runtime, "matmul_seconds", lambda dtype, **_: pytest.fail("timed without native bf16"))
    runtime.cpu_has_fast_bf16.cache_clear()
    assert runtime.cpu_has_fast_bf16() is False
    runtime.cpu_has_fast_bf16.cache_clear()
    assert measure(torch.float32, size=64, repeats=2) > 0.0


def test_precision_auto_is_decided_once_per_machine_whatever_the_load(monkeypatch, tmp_path):
    """A decisive measurement (idle: bf16 2x faster) is recorded for the machine; a later process on a loaded machine
    (both products slowed, fp32 now a little faster) takes the recorded answer instead of flipping to fp32; a close
    call is not recorded, so the next process measures again; another machine's record is not this one's."""
    from bert_pipeline.train import runtime

    cache = tmp_path / "cache" / "precision-auto.json"
    monkeypatch.setenv(runtime.PRECISION_CACHE_ENV, str(cache))
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)

    def decide(bf16: float, fp32: float) -> bool:
        runtime.cpu_has_fast_bf16.cache_clear()  # a new process
        monkeypatch.setattr(runtime, "matmul_seconds", lambda dtype, **_: bf16 if dtype == torch.bfloat16 else fp32)
        return runtime.cpu_has_fast_bf16()

    try:
        assert decide(0.0235, 0.0225) is False  # loaded, first: too close to record
        assert not cache.exists()
        assert decide(0.0049, 0.0106) is True  # idle: decisive, recorded
        recorded = json.loads(cache.read_text())
        assert recorded == {runtime.machine_key(): {"bf16": True, "bf16_ms": 4.9, "fp32_ms": 10.6}}
        assert decide(0.0235, 0.0225) is True  # loaded again: the machine's answer, not the noisy one
        assert decide(0.013, 0.0067) is True  # even a decisive opposite measurement does not overwrite it
        monkeypatch.setattr(runtime, "machine_key", lambda: "another CPU | flags x | torch y")
        assert decide(0.013, 0.0067) is False  # another machine measures for itself
        assert len(json.loads(cache.read_text())) == 2
    finally:
        runtime.cpu_has_fast_bf16.cache_clear()


def test_one_meaning_of_auto_precision_for_every_stage(monkeypatch):
    """Every stage resolves ``auto`` through the one runtime: bf16 only where native, fp16 (with the loss scaler)
    on a CUDA GPU whose bf16 is emulated, fp32 on a CPU without native bf16."""
    from bert_pipeline.train import runtime

    monkeypatch.setattr(runtime, "cpu_has_fast_bf16", lambda: False)
    assert runtime.resolve_precision("auto", "cpu") == "fp32"
    monkeypatch.setattr(runtime, "cuda_has_native_bf16", lambda: False)
    assert runtime.resolve_precision("auto", "cuda") == "fp16"
    monkeypatch.setattr(runtime, "cuda_has_native_bf16", lambda: True)
    assert runtime.resolve_precision("auto", "cuda") == "bf16"
    assert runtime.resolve_precision("bf16", "cpu") == "bf16"
    with pytest.raises(ValueError, match="precision: expected auto"):
        runtime.resolve_precision("fp8", "cpu")
    monkeypatch.setattr(runtime, "cpu_has_fast_bf16", lambda: True)
    on_cpu = make_runtime("auto", cpu=True)
    assert on_cpu.device.type == "cpu" and on_cpu.scaler is None
    with on_cpu.autocast():
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert torch.is_autocast_enabled("cpu")


def test_auto_on_a_gpu_with_emulated_bf16_is_fp16_with_a_scaler(monkeypatch):
    """A V100/T4 reports ``is_bf16_supported()`` True through emulation (slower than fp32): ``auto`` must ask
    for native bf16 only, and fall back to fp16 with loss scaling."""
    from bert_pipeline.train import runtime

    def is_bf16_supported(including_emulation=True):
        return including_emulation  # emulated only

    monkeypatch.setattr(runtime.torch.cuda, "is_bf16_supported", is_bf16_supported)
    assert runtime.resolve_precision("auto", "cuda") == "fp16"
    monkeypatch.setattr(runtime.torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert runtime.resolve_precision("auto", "cuda") == "bf16"
