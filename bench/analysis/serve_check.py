"""What a user of the registered models sees: each task's champion on sentences written for the purpose.

    python bench/analysis/serve_check.py                  # after `dvc repro` (and `bert-pipeline promote`, if run)
    python bench/analysis/serve_check.py --json out.json  # also every prediction as JSON

Run in a repository whose default run has finished. Per task, the champion is the registry's ``champion`` alias
when the MLflow registry has one (``bert-pipeline promote``), else the member ``promote`` would choose: the best
validation main metric of the saved weights (:func:`bert_pipeline.mlops.registry.best_on_validation` over
``bert-pipeline promote``'s own entries); the line above each task names its member and seed. Each input goes
through ``bert-pipeline predict``'s code (:func:`stages.cli.predict_lines`, the CLI's default windows) and is
printed the way the CLI's JSON reads, shortened: NER ``TYPE "text" score`` per entity with the spans a careful
annotator would mark beside it (spaCy's types: PERSON, ORG, GPE, LOC, DATE), sentiment and headline_match the label
and its probability beside the expected label, QA the answer beside the expected one. The inputs are fixed and
were never in any split. Exit code 0; the counts of expected spans and labels found close the output (a reading
aid, not a test).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from stages.cli import entries_by_task, predict_lines  # noqa: E402
from stages.params.root import load_params  # noqa: E402

# (sentence, expected entities as (type, text)); "the" before a name is not part of the span here
NER = [
    ("Yesterday Angela Merkel met Emmanuel Macron in Berlin to discuss the European Union budget.",
     [("DATE", "Yesterday"), ("PERSON", "Angela Merkel"), ("PERSON", "Emmanuel Macron"), ("GPE", "Berlin"),
      ("ORG", "European Union")]),
    ("The World Health Organization said on Tuesday that new cases in Brazil had fallen.",
     [("ORG", "World Health Organization"), ("DATE", "Tuesday"), ("GPE", "Brazil")]),
    ("Tim Cook, the chief executive of Apple, will visit Tokyo in March.",
     [("PERSON", "Tim Cook"), ("ORG", "Apple"), ("GPE", "Tokyo"), ("DATE", "March")]),
    ("Senator Elizabeth Warren criticised Goldman Sachs in a speech in Boston on Monday.",
     [("PERSON", "Elizabeth Warren"), ("ORG", "Goldman Sachs"), ("GPE", "Boston"), ("DATE", "Monday")]),
    ("The United Nations Security Council met in New York on 12 March 2019.",
     [("ORG", "United Nations Security Council"), ("GPE", "New York"), ("DATE", "12 March 2019")]),
    ("Shares of General Motors fell after the carmaker reported weak sales in China last year.",
     [("ORG", "General Motors"), ("GPE", "China"), ("DATE", "last year")]),
    ("Floods along the Mississippi River forced thousands of people in Louisiana to leave their homes.",
     [("LOC", "Mississippi River"), ("GPE", "Louisiana")]),
    ("Barack Obama and his wife Michelle travelled from Chicago to Kenya in July 2015.",
     [("PERSON", "Barack Obama"), ("PERSON", "Michelle"), ("GPE", "Chicago"), ("GPE", "Kenya"),
      ("DATE", "July 2015")]),
]
SENTIMENT = [
    ("A warm, funny and beautifully acted film that earns every one of its tears.", "positive"),
    ("The plot is a mess, the jokes fall flat and the two hours feel like four.", "negative"),
    ("An ambitious thriller that never quite decides what it wants to be, and bores as a result.", "negative"),
    ("Smart, tender and surprising: the best animated feature of the year.", "positive"),
    ("Even a fine cast cannot rescue a script this lazy.", "negative"),
    ("It is slow to start, but the final act is gripping and the performances are superb.", "positive"),
]
_PASSAGE_FED = ("The Federal Reserve raised interest rates on Wednesday for the third time this year, citing a strong "
                "labour market. Janet Yellen, the Fed's chair, said further increases were likely if inflation kept "
                "rising toward the central bank's target.")
_PASSAGE_STORM = ("Hurricane Maria struck Puerto Rico on Wednesday, knocking out power across the island. The "
                  "governor, Ricardo Rossello, asked Washington for emergency aid as rescue teams searched flooded "
                  "towns along the coast.")
HEADLINE_MATCH = [
    ("Fed raises rates again as job market stays strong", _PASSAGE_FED, "same_article"),
    ("Hurricane Maria leaves Puerto Rico without power", _PASSAGE_STORM, "same_article"),
    ("Fed raises rates again as job market stays strong", _PASSAGE_STORM, "other_article"),
    ("Hurricane Maria leaves Puerto Rico without power", _PASSAGE_FED, "other_article"),
]
# Cloze questions, the form the QA task is trained on (Hermann et al. 2015): a headline with an entity blanked;
# "A|B": either answer is right.
QA = [
    ("@placeholder raises rates for the third time this year", _PASSAGE_FED, "The Federal Reserve"),
    ("Yellen says more increases likely at the @placeholder", _PASSAGE_FED, "Federal Reserve|Fed"),
    ("Hurricane Maria knocks out power across @placeholder", _PASSAGE_STORM, "Puerto Rico"),
    ("@placeholder governor asks Washington for emergency aid", _PASSAGE_STORM, "Puerto Rico"),
]


def champions(params: Any) -> dict[str, tuple[Any, str]]:
    """Per task: ``(the champion's Entry, how it was found)``."""
    from bert_pipeline.mlops.registry import best_on_validation, champion_of

    p = params.evaluate
    entries = entries_by_task(p.teacher, p.student, p.scratch, None, params.finetune.data_seed)
    client = None
    try:
        from mlflow import MlflowClient

        from stages.dvc_adapter import tracking_uri

        uri = tracking_uri()
        client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    except Exception:  # noqa: BLE001  (no MLflow store here: the choice promote would make)
        client = None
    out = {}
    for task, task_entries in entries.items():
        version = champion_of(client, task) if client is not None else None
        member = version.tags.get("member") if version is not None else None
        found = [e for e in task_entries if e.member == member]
        if found:
            out[task] = (found[0], f"registry champion v{version.version}")
        else:
            out[task] = (best_on_validation(task_entries), "best on validation (what promote would choose)")
    return out


def predict(model_dir: Path, texts: list[str], **options: Any) -> list[dict[str, Any]]:
    """``bert-pipeline predict MODEL_DIR TEXTS [--context C] [--text-pair P]`` with the CLI's default windows."""
    args = SimpleNamespace(model_dir=model_dir, texts=texts, context=options.get("context"),
                           text_pair=options.get("text_pair"), max_seq_length=384, doc_stride=128, n_best=20,
                           max_answer_length=30)
    return predict_lines(args, texts)


def _norm(text: str) -> str:
    text = text.strip().lower()
    return text[4:] if text.startswith("the ") else text


def check_ner(entry: Any, out: list[str], found: dict[str, list[int]], records: list[Any]) -> None:
    """The NER inputs through ``entry``'s folder: printed lines to ``out``, hits and totals to ``found``, the
    records to ``records``."""
    for sentence, expected in NER:
        record = predict(entry.model_dir, [sentence])[0]
        records.append(record)
        got = {(e["type"], _norm(e["text"])) for e in record["entities"]}
        hits = sum((t, _norm(w)) in got for t, w in expected)
        found["ner"][0] += hits
        found["ner"][1] += len(expected)
        out.append(f"  {sentence}")
        out.append("    model:    " + (", ".join(f'{e["type"]} "{e["text"]}" {e["score"]:.2f}'
                                             for e in record["entities"]) or "(no entity)"))
        out.append("    expected: " + ", ".join(f'{t} "{w}"' for t, w in expected) + f"   [{hits}/{len(expected)}]")


def check_labels(entry: Any, task: str, cases: list[tuple], out: list[str], found: dict[str, list[int]],
                 records: list[Any]) -> None:
    """Sentiment (``(text, expected label)``) or headline_match (``(title, passage, expected label)``) cases."""
    for case in cases:
        text, expected = case[0], case[-1]
        options = {"text_pair": case[1]} if len(case) == 3 else {}
        record = predict(entry.model_dir, [text], **options)[0]
        records.append(record)
        ok = record["label"] == expected
        found[task][0] += ok
        found[task][1] += 1
        pair = f' | "{case[1][:50]}..."' if options else ""
        out.append(f'  "{text}"{pair}\n    model: {record["label"]} {record["probability"]:.2f}   expected: {expected}'
                   f"   [{'ok' if ok else 'WRONG'}]")


def check_qa(entry: Any, out: list[str], found: dict[str, list[int]], records: list[Any]) -> None:
    """The cloze questions, each with its passage as ``--context``."""
    for question, passage, expected in QA:
        record = predict(entry.model_dir, [question], context=passage)[0]
        records.append(record)
        ok = _norm(record["answer"]) in {_norm(a) for a in expected.split("|")}
        found["qa"][0] += ok
        found["qa"][1] += 1
        wanted = '" or "'.join(expected.split("|"))
        out.append(f'  Q: {question}\n    model: "{record["answer"]}" {record["score"]:.2f}   expected: "{wanted}"'
                   f"   [{'ok' if ok else 'WRONG'}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write every prediction record here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    params = load_params()
    chosen = champions(params)
    out: list[str] = []
    found = {task: [0, 0] for task in ("ner", "sentiment", "headline_match", "qa")}
    records: dict[str, list[Any]] = {}
    for task in ("ner", "sentiment", "headline_match", "qa"):
        if task not in chosen:
            out.append(f"{task}: no fine-tuned model")
            continue
        entry, how = chosen[task]
        out.append(f"{task}: champion {entry.member} (seed {entry.seed}; {how}; validation {entry.main_metric} "
                   f"{entry.validation_score:.4f}, test {entry.test_score:.4f}) from {entry.model_dir}")
        rec = records.setdefault(task, [])
        if task == "ner":
            check_ner(entry, out, found, rec)
        elif task == "qa":
            check_qa(entry, out, found, rec)
        else:
            check_labels(entry, task, SENTIMENT if task == "sentiment" else HEADLINE_MATCH, out, found, rec)
    out.append("found: " + ", ".join(f"{task} {hit}/{total}" for task, (hit, total) in found.items() if total))
    sys.stdout.write("\n".join(out) + "\n")
    if args.json:
        args.json.write_text(json.dumps({"champions": {t: {"member": e.member, "seed": e.seed, "how": how}
                                                       for t, (e, how) in chosen.items()},
                                         "predictions": records}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
