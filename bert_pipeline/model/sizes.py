"""The named model shapes. Plain data, importable without torch (the params schema lists these names).

``tiny`` (L=2, H=128), ``mini`` (4/256), ``small`` (4/512), ``medium`` (8/512) from Turc et al. 2019 ("Well-Read
Students Learn Better", Table 1 / the released 24 BERT miniatures: A = H/64, FFN = 4H); ``base`` (12/768, A=12,
110M) and ``large`` (24/1024, A=16, 340M) from Devlin et al. 2019, §3. A size means the same layers, width and heads
for every family; ModernBERT's GeGLU takes :func:`glu_intermediate_size` instead of 4H.
"""

from __future__ import annotations

SIZES: dict[str, dict[str, int]] = {
    # Turc et al. 2019 (BERT miniatures): heads = H / 64, intermediate = 4 H.
    "tiny": {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512},
    "mini": {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024},
    "small": {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "intermediate_size": 2048},
    "medium": {"num_hidden_layers": 8, "hidden_size": 512, "num_attention_heads": 8, "intermediate_size": 2048},
    # Devlin et al. 2019, §3: BERT-Base (110M) and BERT-Large (340M).
    "base": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
    "large": {"num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096},
}


def glu_intermediate_size(hidden_size: int, multiple: int = 64) -> int:
    """The GeGLU intermediate size I that keeps BERT's feed-forward parameter count at width H: ModernBERT's ``Wi``
    maps H -> 2I and ``Wo`` I -> H (3HI weights) against BERT's H -> 4H -> H (8H^2), so I = 8H/3 (Shazeer 2020,
    "GLU Variants Improve Transformer", §2, shrinks d_ff by 2/3 for the same reason), rounded to the nearest multiple
    of ``multiple`` (tiny H=128 -> 320, mini 256 -> 704, base 768 -> 2048)."""
    return max(multiple, round(8 * hidden_size / 3 / multiple) * multiple)
