"""bert_pipeline.model.distillation: layer mapping, student construction, each loss term against a hand computation, timing."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    BertConfig,
    BertForPreTraining,
)

from bert_pipeline.errors import SettingError
from bert_pipeline.evaluation.speed import measure_throughput
from bert_pipeline.model.configs import count_parameters
from bert_pipeline.model.distillation import (
    DistillationModel,
    build_student,
    cosine_loss,
    default_student_layers,
    distillation_loss,
    layer_map,
    mlm_loss,
    resolve_student_layers,
)
from bert_pipeline.model.losses import kl_loss
from bert_pipeline.train.runtime import make_runtime
from tests.conftest import params_error


def tiny_teacher(layers: int = 4, seed: int = 0) -> BertForPreTraining:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, type_vocab_size=2)
    model = BertForPreTraining(config)
    # Make every layer distinguishable (fresh init draws the same distribution for every layer).
    with torch.no_grad():
        for i, layer in enumerate(model.bert.encoder.layer):
            layer.output.LayerNorm.bias.fill_(float(i))
    return model.eval()


# ----------------------------------------------------------------------------------------------- mapping
@pytest.mark.parametrize(
    ("teacher", "student", "expected"),
    [(12, 6, [0, 2, 4, 6, 8, 10]), (4, 2, [0, 2]), (4, 4, [0, 1, 2, 3]), (4, 1, [0]), (6, 4, [0, 1, 3, 4]),
     (3, 1, [0])],
)
def test_layer_map(teacher, student, expected):
    assert layer_map(teacher, student) == expected


def test_layer_map_half_is_every_other_layer():
    for teacher in (2, 4, 6, 8, 12, 24):
        assert layer_map(teacher, teacher // 2) == [2 * i for i in range(teacher // 2)]


@pytest.mark.parametrize("student", [0, -1, 5])
def test_layer_map_rejects_out_of_range(student):
    with pytest.raises(ValueError, match="student_layers"):
        layer_map(4, student)


@pytest.mark.parametrize(("teacher", "student", "expected"), [(6, 3, [0, 1, 2]), (12, 6, [0, 1, 2, 3, 4, 5]),
                                                              (4, 4, [0, 1, 2, 3]), (4, 1, [0])])
def test_layer_map_bottom_keeps_the_lowest_layers(teacher, student, expected):
    assert layer_map(teacher, student, "bottom") == expected
    assert layer_map(teacher, student, "uniform") == layer_map(teacher, student)


def test_layer_map_rejects_an_unknown_selection():
    with pytest.raises(ValueError, match="selection: expected one of uniform, bottom, got 'top'"):
        layer_map(6, 3, "top")


def test_default_student_layers():
    assert [default_student_layers(n) for n in (1, 2, 3, 4, 12, 24)] == [1, 1, 1, 2, 6, 12]


def test_resolve_student_layers_names_its_argument_not_a_params_key():
    assert resolve_student_layers(None, 4, "teacher") == 2
    with pytest.raises(SettingError) as err:
        resolve_student_layers(5, 4, "teacher")
    assert err.value.setting == "student_layers"
    assert str(err.value) == "student_layers: expected an int from 1 to 4 (the teacher in teacher has 4 layers), got 5"


# ------------------------------------------------------------------------------------------------ student
def test_student_copies_embeddings_heads_and_every_other_layer():
    teacher = tiny_teacher(layers=4)
    student, mapping = build_student(teacher, 2)
    assert mapping == [0, 2]
    assert student.config.num_hidden_layers == 2
    assert teacher.config.num_hidden_layers == 4
    assert isinstance(student, BertForPreTraining)
    t_state, s_state = teacher.state_dict(), student.state_dict()
    for key, value in s_state.items():
        if ".encoder.layer." in key:
            prefix, rest = key.split(".encoder.layer.")
            i, tail = rest.split(".", 1)
            t_key = f"{prefix}.encoder.layer.{mapping[int(i)]}.{tail}"
        else:
            t_key = key
        assert torch.equal(value, t_state[t_key]), key
    # The layers taken are the distinguishable ones (bias filled with the teacher index).
    assert student.bert.encoder.layer[1].output.LayerNorm.bias[0].item() == 2.0
    # Drop-in BERT: token_type embeddings, pooler and NSP head are present and copied.
    assert torch.equal(student.bert.embeddings.token_type_embeddings.weight,
                       teacher.bert.embeddings.token_type_embeddings.weight)
    assert torch.equal(student.bert.pooler.dense.weight, teacher.bert.pooler.dense.weight)
    assert torch.equal(student.cls.seq_relationship.weight, teacher.cls.seq_relationship.weight)
    # Copies, not shared tensors: training the student leaves the teacher alone; decoder stays tied.
    assert student.bert.embeddings.word_embeddings.weight.data_ptr() != \
        teacher.bert.embeddings.word_embeddings.weight.data_ptr()
    assert student.cls.predictions.decoder.weight.data_ptr() == student.bert.embeddings.word_embeddings.weight.data_ptr()
    assert count_parameters(student) < count_parameters(teacher)
    per_layer = sum(p.numel() for p in teacher.bert.encoder.layer[0].parameters())
    assert count_parameters(teacher) - count_parameters(student) == 2 * per_layer


def test_student_from_the_bottom_layers_reads_them_in_order():
    teacher = tiny_teacher(layers=4)
    student, mapping = build_student(teacher, 2, "bottom")
    assert mapping == [0, 1]
    # bias filled with the teacher index: student layer i is teacher layer i, the top two dropped
    assert [layer.output.LayerNorm.bias[0].item() for layer in student.bert.encoder.layer] == [0.0, 1.0]
    ids = torch.tensor([[5, 9, 11, 3]])
    with torch.no_grad():
        teacher_states = teacher.eval().bert(ids, output_hidden_states=True).hidden_states
        student_states = student.eval().bert(ids, output_hidden_states=True).hidden_states
    # the same two layers on the same input: the student's last hidden state is the teacher's second
    assert torch.allclose(student_states[-1], teacher_states[2], atol=1e-6)
    assert not torch.allclose(student_states[-1], teacher_states[-1], atol=1e-3)


def test_student_loads_as_masked_lm_and_sequence_classifier(tmp_path):
    teacher = tiny_teacher(layers=4)
    student, _ = build_student(teacher, 2)
    student.save_pretrained(tmp_path)
    ids = torch.tensor([[2, 10, 11, 12, 3, 20, 21, 3]])
    mlm, info = AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == set() or not info["missing_keys"]
    assert mlm.config.num_hidden_layers == 2
    with torch.no_grad():
        expected = student.eval()(input_ids=ids).prediction_logits
        got = mlm.eval()(input_ids=ids).logits
    torch.testing.assert_close(got, expected)
    clf = AutoModelForSequenceClassification.from_pretrained(tmp_path, num_labels=3)
    assert torch.equal(clf.bert.encoder.layer[1].output.LayerNorm.bias, student.bert.encoder.layer[1].output.LayerNorm.bias)
    assert torch.equal(clf.bert.pooler.dense.weight, student.bert.pooler.dense.weight)
    with torch.no_grad():
        assert clf.eval()(input_ids=ids).logits.shape == (1, 3)


# ------------------------------------------------------------------------------------------------- losses
S = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]]
T = [[2.0, 1.0, 0.0], [0.5, 0.5, 2.5]]


def _softmax(row, temp=1.0):
    exps = [math.exp(x / temp) for x in row]
    return [e / sum(exps) for e in exps]


def test_kl_term_matches_hand_computation():
    temp = 2.0
    expected = 0.0
    for s_row, t_row in zip(S, T, strict=True):
        p_s, p_t = _softmax(s_row, temp), _softmax(t_row, temp)
        expected += sum(pt * math.log(pt / ps) for pt, ps in zip(p_t, p_s, strict=True))
    expected = expected / len(S) * temp**2
    got = kl_loss(torch.tensor(S), torch.tensor(T), temp)
    assert got.item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("temp", [0.5, 1.0, 2.0, 8.0])
def test_kl_term_is_zero_when_student_equals_teacher(temp):
    logits = torch.randn(5, 64, generator=torch.Generator().manual_seed(1)) * 3
    assert kl_loss(logits, logits.clone(), temp).item() == pytest.approx(0.0, abs=1e-6)
    assert kl_loss(logits + 0.5, logits, temp).item() == pytest.approx(0.0, abs=1e-5)  # shift-invariant
    assert kl_loss(logits.flip(0), logits, temp).item() > 0.01


def test_mlm_term_matches_hand_computation_and_ignores_minus_100():
    labels = [2, 0]
    expected = -sum(math.log(_softmax(row)[y]) for row, y in zip(S, labels, strict=True)) / 2
    got = mlm_loss(torch.tensor(S), torch.tensor(labels))
    assert got.item() == pytest.approx(expected, rel=1e-6)
    only_first = mlm_loss(torch.tensor(S), torch.tensor([2, -100]))
    assert only_first.item() == pytest.approx(-math.log(_softmax(S[0])[2]), rel=1e-6)


def test_cosine_term_matches_hand_computation():
    hs = [[1.0, 0.0, 1.0], [3.0, 4.0, 0.0]]
    ht = [[1.0, 1.0, 0.0], [-3.0, -4.0, 0.0]]

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    expected = sum(1 - cos(a, b) for a, b in zip(hs, ht, strict=True)) / 2  # (1 - 0.5) and (1 - (-1)) -> 1.25
    assert expected == pytest.approx(1.25)
    assert cosine_loss(torch.tensor(hs), torch.tensor(ht)).item() == pytest.approx(expected, rel=1e-6)
    assert cosine_loss(torch.tensor(hs), 2 * torch.tensor(hs)).item() == pytest.approx(0.0, abs=1e-6)


def test_total_is_the_weighted_sum_and_gradients_reach_the_student():
    s_logits = torch.tensor(S, requires_grad=True)
    s_hidden = torch.tensor([[1.0, 0.0, 1.0], [3.0, 4.0, 0.0]], requires_grad=True)
    t_hidden = torch.tensor([[1.0, 1.0, 0.0], [-3.0, -4.0, 0.0]])
    labels = torch.tensor([2, 0])
    out = distillation_loss(s_logits, torch.tensor(T), labels, s_hidden, t_hidden,
                            temperature=2.0, alpha_ce=5.0, alpha_mlm=2.0, alpha_cos=1.0)
    assert out.kl.item() == pytest.approx(kl_loss(torch.tensor(S), torch.tensor(T), 2.0).item())
    assert out.mlm.item() == pytest.approx(mlm_loss(torch.tensor(S), labels).item())
    assert out.cos.item() == pytest.approx(1.25)
    assert out.total.item() == pytest.approx(5.0 * out.kl.item() + 2.0 * out.mlm.item() + 1.0 * out.cos.item())
    out.total.backward()
    assert s_logits.grad.abs().sum() > 0
    assert s_hidden.grad.abs().sum() > 0
    only_mlm = distillation_loss(torch.tensor(S), torch.tensor(T), labels, s_hidden.detach(), t_hidden,
                                 temperature=2.0, alpha_ce=0.0, alpha_mlm=1.0, alpha_cos=0.0)
    assert only_mlm.total.item() == pytest.approx(only_mlm.mlm.item())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"temperature": 0.0}, "temperature"), ({"temperature": -1.0}, "temperature"),
     ({"alpha_ce": 0.0, "alpha_mlm": 0.0, "alpha_cos": 0.0}, "not all 0"), ({"alpha_cos": -1.0}, "alpha")],
)
def test_bad_loss_settings_raise(kwargs, match):
    args = {"temperature": 2.0, "alpha_ce": 5.0, "alpha_mlm": 2.0, "alpha_cos": 1.0, **kwargs}
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=match):
        distillation_loss(x, x, torch.tensor([0, 1]), x, x, **args)


# --------------------------------------------------------------------------------------------- throughput
def test_throughput_reports_median_and_restores_mode():
    model = tiny_teacher(layers=2).train()
    out = measure_throughput({"model": model.base_model}, make_runtime("fp32", cpu=True), batch_size=4, seq_len=16, warmup=1, runs=3)["model"]
    assert out["batch_size"] == 4
    assert out["seq_len"] == 16
    assert out["runs"] == 3 and out["device"] == "cpu"
    assert out["sequences_per_second"] == pytest.approx(4 / out["median_seconds"])
    assert model.training
    student, _ = build_student(tiny_teacher(layers=4), 1)
    both = measure_throughput({"teacher": tiny_teacher(layers=4).base_model, "student": student.base_model},
                              make_runtime("fp32", cpu=True), batch_size=4, seq_len=16, warmup=0, runs=2)
    assert set(both) == {"teacher", "student"}
    assert all(v["runs"] == 2 for v in both.values())


# ------------------------------------------------------------------------------------------------- params
@pytest.mark.parametrize(
    ("change", "message"),
    [({"student_layers": 0}, "params.yaml: distill.student_layers: expected int >= 1 or null, got 0"),
     ({"temperature": 0.0}, "params.yaml: distill.temperature: expected float > 0, got 0.0"),
     ({"temperature": -2.0}, "params.yaml: distill.temperature: expected float > 0, got -2.0"),
     ({"alpha_ce": 0.0, "alpha_mlm": 0, "alpha_cos": 0.0},
      "params.yaml: distill.alpha_ce, distill.alpha_mlm, distill.alpha_cos: expected at least one > 0, got all 0")],
)
def test_bad_distill_params_are_one_line_errors(raw, change, message):
    raw["distill"].update(change)
    assert params_error(raw) == message


# -------------------------------------------------------------------------------------------------- model
def _batch(seed: int = 0, batch: int = 4, seq: int = 12, vocab: int = 64) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab, (batch, seq), generator=gen)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, -3:] = 0  # some padding
    labels = torch.full_like(input_ids, -100)
    pick = torch.rand(batch, seq, generator=gen) < 0.3
    pick[:, 1] = True
    pick &= attention_mask.bool()
    labels[pick] = input_ids[pick]
    input_ids = input_ids.masked_fill(pick, 4)  # [MASK]
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask,
            "token_type_ids": torch.zeros_like(input_ids), "next_sentence_label": torch.zeros(batch, dtype=torch.long)}


LOSS = {"temperature": 2.0, "alpha_ce": 5.0, "alpha_mlm": 2.0, "alpha_cos": 1.0}


def test_distillation_model_holds_only_the_student_and_matches_a_full_forward():
    teacher = tiny_teacher(layers=4)
    student, _ = build_student(teacher, 4)  # same depth: the student is an exact copy
    model = DistillationModel(student, teacher, **LOSS).eval()
    assert {n.split(".")[0] for n in model.state_dict()} == {"student"}
    assert sum(p.numel() for p in model.parameters()) == count_parameters(student)
    batch = _batch()
    with torch.no_grad():
        out = model(**batch)
        full = teacher(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       token_type_ids=batch["token_type_ids"]).prediction_logits
    picked = batch["labels"] != -100
    expected_mlm = torch.nn.functional.cross_entropy(full[picked], batch["labels"][picked])
    assert out.kl_loss.item() == pytest.approx(0.0, abs=1e-5)
    assert out.cos_loss.item() == pytest.approx(0.0, abs=1e-5)
    assert out.mlm_loss.item() == pytest.approx(expected_mlm.item(), rel=1e-5)
    assert out.mlm_count.item() == int(picked.sum())
    assert out.mlm_correct.item() == int((full[picked].argmax(-1) == batch["labels"][picked]).sum())
    model.train()
    assert student.training
    assert not teacher.training


def test_distillation_steps_lower_the_loss_and_leave_the_teacher_alone():
    teacher = tiny_teacher(layers=4, seed=3)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    student, _ = build_student(teacher, 2)
    model = DistillationModel(student, teacher, **LOSS, cos_positions="masked").train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = _batch(seed=5)
    losses = []
    for _ in range(12):
        out = model(**batch)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss.item())
    assert losses[-1] < 0.85 * losses[0]
    assert all(torch.equal(v, before[k]) for k, v in teacher.state_dict().items())
    assert all(p.grad is None for p in teacher.parameters())
