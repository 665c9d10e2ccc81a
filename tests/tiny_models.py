"""Tiny randomly initialised BERTs saved like ``finetune`` saves them (save_pretrained + tokenizer beside).

Hidden size 32, 2 layers, a WordPiece vocabulary built from a word list with the ``tokenizers`` library. Heads'
biases can be set so a prediction is determined whatever the encoder computes. :func:`bert_tokenizer` builds a
``BertTokenizerFast`` over any word list.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import (
    BertConfig,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertTokenizerFast,
    PreTrainedTokenizerFast,
)

from tests.pretrain_fixtures import tiny_config

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ("the a film movie was is good bad great awful boring alice bob paris london met in of and to who where "
         "visited went loved hated plot actors story . , ? ! ##s ##ed ##ing").split()


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """An uncased WordPiece tokenizer over :data:`WORDS` with BERT's special tokens and templates."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=64,
    )


def bert_tokenizer(tokens: Iterable[str]) -> BertTokenizerFast:
    """A lowercasing ``BertTokenizerFast`` whose vocabulary is BERT's five special tokens (:data:`SPECIALS`, ids
    0-4) then ``tokens`` in order (repeats dropped)."""
    vocab = dict.fromkeys([*SPECIALS, *tokens])
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)


def _config(tokenizer, **kw) -> BertConfig:
    return tiny_config(vocab_size=len(tokenizer), **kw)


def save_classifier(path: Path, labels=("negative", "positive"), favour: int | None = 1, seed: int = 0,
                    **config) -> Path:
    """A sequence classifier whose head bias makes ``labels[favour]`` win by a wide margin (None: random);
    ``config``: BertConfig fields that differ (e.g. ``num_hidden_layers=1`` for a smaller one)."""
    torch.manual_seed(seed)
    tok = tiny_tokenizer()
    cfg = _config(tok, id2label=dict(enumerate(labels)), label2id={v: i for i, v in enumerate(labels)}, **config)
    model = BertForSequenceClassification(cfg)
    if favour is not None:
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.fill_(0.0)
            model.classifier.bias[favour] = 5.0
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def save_tagger(path: Path, labels=("O", "B-PER", "I-PER", "B-LOC", "I-LOC"), favour: str = "B-PER",
                seed: int = 0) -> Path:
    """A token classifier whose head bias makes every token ``favour``."""
    torch.manual_seed(seed)
    tok = tiny_tokenizer()
    cfg = _config(tok, id2label=dict(enumerate(labels)), label2id={v: i for i, v in enumerate(labels)})
    model = BertForTokenClassification(cfg)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.fill_(0.0)
        model.classifier.bias[labels.index(favour)] = 5.0
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def save_word_tagger(path: Path, word: str = "alice", label: str = "B-PER",
                     labels=("O", "B-PER", "I-PER", "B-LOC", "I-LOC"), max_position_embeddings: int = 512) -> Path:
    """A token classifier that tags exactly the tokens of ``word`` as ``label`` and every other token ``O``,
    wherever they stand: every layer's attention and feed-forward output is zeroed (so each layer is the identity
    after its LayerNorm), position and token-type embeddings are zero, and only ``word``'s embedding is non-zero,
    in the direction the classifier reads for ``label``."""
    tok = tiny_tokenizer()
    cfg = _config(tok, id2label=dict(enumerate(labels)), label2id={v: i for i, v in enumerate(labels)},
                  max_position_embeddings=max_position_embeddings)
    model = BertForTokenClassification(cfg)
    direction = torch.zeros(cfg.hidden_size)
    direction[0], direction[1] = 1.0, -1.0
    with torch.no_grad():
        for layer in model.bert.encoder.layer:
            for dense in (layer.attention.output.dense, layer.output.dense):
                dense.weight.zero_()
                dense.bias.zero_()
        emb = model.bert.embeddings
        emb.word_embeddings.weight.zero_()
        emb.word_embeddings.weight[tok.convert_tokens_to_ids(word)] = direction
        emb.position_embeddings.weight.zero_()
        emb.token_type_embeddings.weight.zero_()
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
        model.classifier.weight[labels.index(label)] = direction
        model.classifier.bias[labels.index("O")] = 1.0
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def save_reader(path: Path, seed: int = 0) -> Path:
    """A randomly initialised extractive QA model (start/end logits per token)."""
    torch.manual_seed(seed)
    tok = tiny_tokenizer()
    model = BertForQuestionAnswering(_config(tok))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
