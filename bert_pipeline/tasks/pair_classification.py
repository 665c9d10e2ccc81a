"""``pair_classification``: two texts (``text``, ``text_pair``) encoded as one pair ``[CLS] a [SEP] b [SEP]``, so
``token_type_ids`` are 0 over the first segment and 1 over the second where the tokenizer has token types (BERT's
sentence-pair tasks such as MNLI, Devlin et al. 2019, §4.1 and Fig. 4a); ``[CLS]`` -> Linear; scored as
classification."""

from __future__ import annotations

from bert_pipeline.tasks.classification import ClassificationKind


class PairClassificationKind(ClassificationKind):
    """Classification of a text pair; the fine-tuned config records ``task_kind`` so serving reads two texts."""

    name = "pair_classification"
    pairs = True
    needs_pair = True
    user_options = ("text_pair_column",)
    report_data_text = "sentence pairs (`text`, `text_pair`)"
    pyfunc_input = "sentence-pair-classification"  # rows of text and text_pair (shadows the base property)
    transformers_flavour = False  # pairs in: the flavour's pipeline reads one text
    predict_example = '--text-pair "The city council voted on Monday." "Council votes"'

    def model_class(self, config, pooling: str):
        config.task_kind = self.name  # serving reads it: a pair classifier takes two texts
        return super().model_class(config, pooling)

    def _inputs_text(self) -> str:
        return " of a text pair (`token_type_ids` 0/1 where the tokenizer has them)"


KIND = PairClassificationKind()
