"""Span adapters for the Detector: raw rows `{id, context, question, answer, spans, task_type, ...}`, cleaned into
`SpanRecord`s (training.data.records) by `clean_span_records`.

`spans` are character offsets into `answer` (`{"start", "end", "text", "label_type"?}`); an empty list is a
faithful answer. Adapters return what the dataset says; `clean_span_records` then validates every record
with inference.spans.check_spans and reports problems (with ids) instead of dropping them silently.

The full RAGTruth test split (`ragtruth_test`) is evaluation-only: `extra["eval_only"]` makes training refuse
it. The local subset (`ragtruth_test_subset`) may be trained on (its PROVENANCE.md: the responses of the sources
kept back for evaluation were removed); split it by `source_id`.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import glob
import logging
import os
import re
from collections import Counter, defaultdict
from pathlib import Path

from inference.grounding import STOPWORDS
from inference.spans import FATAL_SPAN_PROBLEMS, check_spans, normalize_task_type, render_context
from training.data.base import (
    Adapter,
    DataError,
    get_adapter,
    hub_rows,
    read_csv,
    read_json,
    read_jsonl,
    register,
)
from training.data.records import SpanRecord

log = logging.getLogger("halugate.data")

RAGTRUTH_URL = "https://raw.githubusercontent.com/ParticleMedia/RAGTruth/main/dataset/{name}"
RAGTRUTH_FILES = ("response.jsonl", "source_info.jsonl")


def _span_adapter(name, local_files, local, hub_id=None, hub=None, description="", **extra):
    return register(Adapter(name=name, kind="span", local_files=local_files, load_local=local, hub_id=hub_id,
                            load_hub=hub, description=description, extra=extra))


def _rec(id_, context, question, answer, spans, task_type, **more) -> dict:
    return {"id": str(id_), "context": context, "question": question, "answer": answer, "spans": spans,
            "task_type": task_type, **more}


# ---- RAGTruth ---------------------------------------------------------------------------------------------

def _ragtruth_context(task_type: str, source_info) -> tuple[object, str | None]:
    """(context, question) from RAGTruth's source_info: QA {question, passages}; Summary str; Data2txt dict."""
    if isinstance(source_info, str) and source_info.strip().startswith("{") and task_type != "Summary":
        try:
            source_info = ast.literal_eval(source_info)
        except (ValueError, SyntaxError):
            pass
    if task_type == "QA" and isinstance(source_info, dict):
        return source_info.get("passages", ""), source_info.get("question")
    return source_info, None


def _ragtruth_record(resp: dict, source: dict | None, context_override=None, question_override=None) -> dict:
    task = normalize_task_type(resp.get("task_type") or (source or {}).get("task_type")) or resp.get("task_type")
    if source is not None:
        context, question = _ragtruth_context(task, source.get("source_info"))
    else:
        context, question = context_override, question_override
    spans = [{k: lab.get(k) for k in ("start", "end", "text", "label_type")} for lab in resp.get("labels") or []]
    return _rec(f"ragtruth-{resp.get('id')}", render_context(context) if context else "", question or None,
                resp.get("response"), spans, task, model=resp.get("model"), split=resp.get("split"),
                source_id=str(resp.get("source_id")))


def ragtruth_row_record(row: dict) -> dict:
    """One self-contained RAGTruth-schema row (response + labels, with its own `source_info`, or else a
    `reference` / `context` and a `question`) as a span record."""
    if row.get("source_info") is not None:
        return _ragtruth_record(row, {"source_info": row["source_info"], "task_type": row.get("task_type")})
    return _ragtruth_record(row, None, row.get("reference") or row.get("context"), row.get("question"))


def _ragtruth_files(data_dir: Path | None) -> tuple[Path, Path]:
    """response.jsonl + source_info.jsonl from DATA_DIR/ragtruth/ or the cache; downloaded once if absent."""
    if data_dir is not None and all((data_dir / "ragtruth" / f).is_file() for f in RAGTRUTH_FILES):
        return data_dir / "ragtruth" / RAGTRUTH_FILES[0], data_dir / "ragtruth" / RAGTRUTH_FILES[1]
    cache = Path(os.environ.get("HALUGATE_CACHE", Path.home() / ".cache" / "halugate")) / "ragtruth"
    paths = [cache / f for f in RAGTRUTH_FILES]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        import httpx

        cache.mkdir(parents=True, exist_ok=True)
        for p in missing:
            url = RAGTRUTH_URL.format(name=p.name)
            try:
                r = httpx.get(url, timeout=60, follow_redirects=True)
                r.raise_for_status()
            except Exception as exc:  # noqa: BLE001 - one clear line with the alternatives
                where = f"{data_dir}/ragtruth/" if data_dir else "DATA_DIR/ragtruth/"
                raise DataError(f"RAGTruth: cannot download {url} ({type(exc).__name__}); put response.jsonl "
                                f"and source_info.jsonl (github.com/ParticleMedia/RAGTruth, dataset/) in {where}"
                                ) from None
            tmp = p.with_suffix(".part")
            tmp.write_bytes(r.content)
            tmp.replace(p)
    return paths[0], paths[1]


def load_ragtruth(data_dir: Path | None, split: str) -> list[dict]:
    """RAGTruth in its original schema (response.jsonl joined with source_info.jsonl on source_id)."""
    resp_path, src_path = _ragtruth_files(data_dir)
    return join_ragtruth(resp_path, src_path, split)


def join_ragtruth(resp_path: Path, src_path: Path, split: str | None) -> list[dict]:
    """response.jsonl rows of `split` (None: all) joined with their source_info.jsonl row."""
    sources = {str(s["source_id"]): s for s in read_jsonl(src_path)}
    out = []
    for resp in read_jsonl(resp_path):
        if split is not None and resp.get("split") != split:
            continue
        src = sources.get(str(resp.get("source_id")))
        rec = _ragtruth_record(resp, src) if src else _ragtruth_record(resp, None)
        if src is None:
            rec["_problem"] = "missing_source_info"
        out.append(rec)
    return out


def load_ragtruth_test_subset(data_dir: Path) -> list[dict]:
    """The local RAGTruth test subset: two files with different fields (see its PROVENANCE.md).

    gpt_baseline_predictions.jsonl has the original schema + source_info; test_balanced.jsonl carries the
    context in `reference` (a dict for Data2txt, empty for its QA rows) and the question in `question`. 62
    responses appear in both files: the copy with source_info wins and the other is reported as a duplicate.
    """
    return load_ragtruth_subset_folder(data_dir / "ragtruth_test_subset")


def load_ragtruth_subset_folder(folder: Path) -> list[dict]:
    """Both files of the subset folder (or whichever of the two is present)."""
    out: dict[str, dict] = {}
    if not (folder / "gpt_baseline_predictions.jsonl").is_file() and not (folder / "test_balanced.jsonl").is_file():
        raise DataError(f"{folder}: neither gpt_baseline_predictions.jsonl nor test_balanced.jsonl is there")
    gpt = folder / "gpt_baseline_predictions.jsonl"
    for resp in read_jsonl(gpt) if gpt.is_file() else []:
        src = {"source_info": resp.get("source_info"), "task_type": resp.get("task_type")}
        rec = _ragtruth_record(resp, src)
        rec["file"] = "gpt_baseline_predictions.jsonl"
        out[rec["id"]] = rec
    dups = []
    balanced = folder / "test_balanced.jsonl"
    for resp in read_jsonl(balanced) if balanced.is_file() else []:
        rec = _ragtruth_record(resp, None, context_override=resp.get("reference"),
                               question_override=resp.get("question"))
        rec["file"] = "test_balanced.jsonl"
        if rec["id"] in out:
            dups.append(rec["id"])
            continue
        out[rec["id"]] = rec
    records = list(out.values())
    for d in dups:  # reported by clean_span_records, not silently merged
        records.append({"id": d, "_problem": "duplicate_id (kept the gpt_baseline_predictions copy)"})
    return records


_span_adapter("ragtruth_train", [], lambda d: load_ragtruth(d, "train"),
              "ParticleMedia/RAGTruth", lambda: load_ragtruth(None, "train"),
              "RAGTruth train split, original schema (DATA_DIR/ragtruth/{response,source_info}.jsonl or download)")
_span_adapter("ragtruth_test", [], lambda d: load_ragtruth(d, "test"),
              "ParticleMedia/RAGTruth", lambda: load_ragtruth(None, "test"),
              "RAGTruth test split, original schema (evaluation only)", eval_only=True)
_span_adapter("ragtruth_test_subset", ["ragtruth_test_subset/test_balanced.jsonl",
                                       "ragtruth_test_subset/gpt_baseline_predictions.jsonl"],
              load_ragtruth_test_subset,
              description=("local RAGTruth responses with gold spans (829; 656 with their context). May be trained "
                           "on: RAGTruth responses from other sources are kept back for evaluation (PROVENANCE.md)"))


# ---- FaithBench -------------------------------------------------------------------------------------------

FAITHBENCH_HALLUCINATED = ("Unwanted",)  # Unwanted, Unwanted.Intrinsic, Unwanted.Extrinsic; not Benign/Questionable


def _union(spans: list[dict], answer: str) -> list[dict]:
    """Union of several annotators' spans (their overlaps are expected, not a data problem)."""
    ranges = sorted((s["start"], s["end"]) for s in spans)
    merged: list[list[int]] = []
    for a, b in ranges:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [{"start": a, "end": b, "text": answer[a:b], "label_type": "Unwanted"} for a, b in merged]


def load_faithbench(data_dir: Path) -> list[dict]:
    out = []
    for path in sorted(glob.glob(str(data_dir / "faithbench/data_for_release/batch_*.json"))):
        batch = Path(path).stem.split("_")[-1]
        for s in read_json(Path(path)).get("samples", []):
            summary = s.get("summary")
            spans, bad = [], []
            for a in s.get("annotations") or []:
                labels = a.get("label") or []
                if not any(str(lab).startswith(FAITHBENCH_HALLUCINATED) for lab in labels):
                    continue
                sp = {"start": a.get("summary_start"), "end": a.get("summary_end"), "text": a.get("summary_span")}
                good, problems = check_spans(summary or "", [sp])
                if problems and set(problems) & FATAL_SPAN_PROBLEMS:
                    bad.append(sp)  # keep it: clean_span_records reports it with the id
                else:
                    spans.extend(good)
            spans = _union(spans, summary) if spans and isinstance(summary, str) else spans
            out.append(_rec(f"faithbench-b{batch}-{s.get('sample_id')}", s.get("source"), None, summary,
                            spans + bad, "Summary", model=(s.get("metadata") or {}).get("summarizer")))
    return out


_span_adapter("faithbench", ["faithbench/data_for_release"], load_faithbench,
              description="FaithBench summaries with annotator spans (Unwanted.* = hallucinated; union)")


# ---- HaluQuestQA ------------------------------------------------------------------------------------------

def _literal_list(text: str) -> list:
    text = (text or "").strip()
    if not text:
        return []
    value = ast.literal_eval(text)
    return list(value) if isinstance(value, (list, tuple)) else [value]


def load_haluquestqa(data_dir: Path) -> list[dict]:
    """Long-form QA (no source context): factuality error spans located in answer 1 or 2 by their text."""
    out = []
    for i, row in enumerate(read_csv(data_dir / "haluquestqa/HaluQuestQA.csv", delimiter="\t")):
        rid = row.get("source_file") or str(i)
        question = row.get("question_text")
        try:
            texts = _literal_list(row.get("factuality_span"))
            which = _literal_list(row.get("factuality_label"))
        except (ValueError, SyntaxError):
            out.append({"id": f"haluquestqa-{rid}", "_problem": "unparseable factuality_span/factuality_label"})
            continue
        if len(texts) != len(which):
            out.append({"id": f"haluquestqa-{rid}",
                        "_problem": f"{len(texts)} factuality spans but {len(which)} answer labels"})
            continue
        for k, key in ((1, "ans1_text"), (2, "ans2_text")):
            answer = row.get(key)
            spans = [{"text": t.strip(), "label_type": "factuality"} for t, w in zip(texts, which)
                     if str(w) == f"answer{k}" and str(t).strip()]
            out.append(_rec(f"haluquestqa-{rid}-a{k}", "", question, answer, spans, "QA",
                            author=row.get(f"ans{k}_label")))
    return out


_span_adapter("haluquestqa", ["haluquestqa/HaluQuestQA.csv"], load_haluquestqa,
              description="HaluQuestQA long-form answers with expert factuality spans (question only, no context)",
              has_context=False)


# ---- HaluEval QA ------------------------------------------------------------------------------------------

def _halueval_qa(rows) -> list[dict]:
    out = []
    for i, r in enumerate(rows):
        ctx, q = r.get("knowledge"), r.get("question")
        right, wrong = r.get("right_answer"), r.get("hallucinated_answer")
        out.append(_rec(f"halueval_qa-{i}-right", ctx, q, right, [], "QA"))
        spans = [{"start": 0, "end": len(wrong), "text": wrong, "label_type": "hallucinated_answer"}] \
            if isinstance(wrong, str) and wrong else []
        out.append(_rec(f"halueval_qa-{i}-hallucinated", ctx, q, wrong, spans, "QA"))
    return out


_span_adapter("halueval_qa_spans", ["halueval/qa_data_first1000.json"],
              lambda d: _halueval_qa(read_jsonl(d / "halueval/qa_data_first1000.json")),
              "pminervini/HaluEval", lambda: _halueval_qa(hub_rows("pminervini/HaluEval", "qa", "data")),
              "HaluEval QA: knowledge + question; right answer (no span), hallucinated answer (whole answer)")


# ---- SummEdits --------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\S+")


def diff_spans(original: str, edited: str) -> list[dict]:
    """Word-level diff: the words of `edited` that replace or add to `original`, merged when adjacent."""
    a = [m.group() for m in _TOKEN.finditer(original)]
    b_tokens = list(_TOKEN.finditer(edited))
    b = [m.group() for m in b_tokens]
    spans = []
    for op, _i1, _i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op in ("replace", "insert") and j2 > j1:
            start, end = b_tokens[j1].start(), b_tokens[j2 - 1].end()
            if spans and start - spans[-1]["end"] <= 1:
                spans[-1]["end"] = end
            else:
                spans.append({"start": start, "end": end})
    for s in spans:
        s["text"] = edited[s["start"]:s["end"]]
        s["label_type"] = "summedits_edit"
    return spans


def load_summedits(data_dir: Path) -> list[dict]:
    """Consistent summaries (label 1) -> no spans; inconsistent (0) -> the edited words as spans.

    Diff spans over-approximate: an inconsistent edit may also paraphrase words that stay faithful.
    """
    out = []
    for path in sorted(glob.glob(str(data_dir / "summedits/summedits_*.json"))):
        domain = Path(path).stem.replace("summedits_", "")
        for r in read_json(Path(path)):
            rid = f"summedits-{domain}-{r.get('id')}"
            label = int(r.get("label", -1)) if str(r.get("label", "")).strip() in ("0", "1") else None
            summary = r.get("summary")
            if label is None:
                out.append({"id": rid, "_problem": f"label is {r.get('label')!r}, expected 0 or 1"})
                continue
            spans = [] if label == 1 else diff_spans(r.get("original_summary") or "", summary or "")
            rec = _rec(rid, r.get("doc"), None, summary, spans, "Summary", domain=domain)
            if label == 0 and not spans:
                rec["_problem"] = "inconsistent summary without an inserted/replaced word (deletion-only edit)"
            out.append(rec)
    return out


_span_adapter("summedits_spans", ["summedits"], load_summedits,
              description="SummEdits: consistent summaries (no span) and edited inconsistent ones (diff spans)")


# ---- WiCE: Wikipedia sub-claims against the page they cite, unsupported words marked -------------------------

WICE_NEIGHBOURS = 2  # evidence sentences kept on each side of a supporting one (the rest of the page is dropped)


def token_flag_spans(text: str, tokens: list[str], flags: list[bool]) -> list[dict] | None:
    """Character spans of `text` covering the flagged word tokens (consecutive flagged tokens merged); None when a
    token cannot be found in order."""
    spans, cursor, open_span = [], 0, None
    for token, flag in zip(tokens, flags):
        at = text.find(token, cursor)
        if at < 0:
            return None
        cursor = at + len(token)
        if flag and open_span is not None:
            open_span[1] = cursor
        elif flag:
            open_span = [at, cursor]
        elif open_span is not None:
            spans.append(open_span)
            open_span = None
    if open_span is not None:
        spans.append(open_span)
    return [{"start": s, "end": e, "text": text[s:e]} for s, e in spans]


def wice_context(evidence: list[str], supporting: list[list[int]], neighbours: int = WICE_NEIGHBOURS) -> str:
    """The cited page cut to its supporting sentences and `neighbours` sentences around each, in page order (the
    whole page averages ~8k characters, over any 512-token window). The oracle choice of sentences is WiCE's own
    annotation: a Detector trained on it sees the evidence that exists, as the runtime's best window would."""
    keep = set()
    for group in supporting:
        for i in group:
            keep.update(range(max(0, i - neighbours), min(len(evidence), i + neighbours + 1)))
    lines = [evidence[i] for i in sorted(keep) if not evidence[i].startswith("(meta data)")]
    return " ".join(line.strip() for line in lines if line.strip())


def load_wice(data_dir: Path, splits=("train", "dev")) -> list[dict]:
    """WiCE `non_supported_tokens` (every row is a partially supported sub-claim): the claim is the answer, its
    non-supported word tokens the spans, the cited page's supporting sentences (+ neighbours) the context."""
    out = []
    for split in splits:
        for r in read_jsonl(data_dir / f"wice/non_supported_tokens/{split}.jsonl"):
            rid = f"wice-{r.get('meta', {}).get('id', '')}"
            claim, tokens, flags = r.get("claim"), r.get("claim_tokens") or [], r.get("non_supported_spans") or []
            if not isinstance(claim, str) or len(tokens) != len(flags):
                out.append({"id": rid, "_problem": "no claim text, or claim_tokens and non_supported_spans differ "
                                                   "in length"})
                continue
            spans = token_flag_spans(claim, tokens, flags)
            if spans is None:
                out.append({"id": rid, "_problem": "a claim token is not in the claim text"})
                continue
            context = wice_context(r.get("evidence") or [], r.get("supporting_sentences") or [])
            out.append(_rec(rid, context, None, claim, spans, "Summary", split=split))
    return out


_span_adapter("wice_spans", ["wice/non_supported_tokens/train.jsonl", "wice/non_supported_tokens/dev.jsonl"],
              load_wice, description="WiCE sub-claims (train + dev): unsupported words of a Wikipedia claim "
                                     "against the supporting sentences of the page it cites (ODC-BY; Wikipedia "
                                     "text CC BY-SA)")
_span_adapter("wice_spans_test", ["wice/non_supported_tokens/test.jsonl"],
              lambda d: load_wice(d, ("test",)), eval_only=True,
              description="WiCE sub-claims, test split (evaluation only)")


# ---- Dolly: grounded (context, extractive answer) pairs for the synthetic generator ---------------------------

_SENT = re.compile(r"[^.!?]+[.!?]+(?=\s|$)|[^.!?]+$")
_WORDS = re.compile(r"[a-z0-9]+")
# The runtime's stopword list (inference.grounding), plus words of instructions that say nothing of their topic.
_STOP = STOPWORDS | frozenset(["give", "based", "text", "reference"])


def extractive_answer(question: str, context: str, max_sentences: int = 2) -> str | None:
    """The context sentence(s) sharing most content words with the question: faithful by construction."""
    sents = [m.group().strip() for m in _SENT.finditer(context) if len(m.group().strip()) >= 20]
    if not sents:
        return None
    qwords = set(_WORDS.findall(question.lower())) - _STOP
    scores = [len(qwords & set(_WORDS.findall(s.lower()))) for s in sents]
    best = max(range(len(sents)), key=lambda i: (scores[i], -i))
    picked = sents[best:best + max_sentences]
    return " ".join(picked)


def load_dolly_extractive(data_dir: Path) -> list[dict]:
    """Dolly instructions that carry a context; the answer is extracted from the context (Dolly's `output`
    column is a stylised GPT rewrite and is not used)."""
    out = []
    for path in sorted(glob.glob(str(data_dir / "dolly15k_instructions_restyled/output*.csv"))):
        for r in read_csv(Path(path)):
            ctx = (r.get("context") or "").strip()
            if not ctx:
                continue
            answer = extractive_answer(r.get("instruction") or "", ctx)
            rid = f"dolly-{r.get('index')}"
            if answer is None:
                out.append({"id": rid, "_problem": "no sentence of 20+ characters in the context"})
                continue
            out.append(_rec(rid, ctx, (r.get("instruction") or "").strip(), answer, [], "QA"))
    return out


def _dolly_hub():
    for i, r in enumerate(hub_rows("databricks/databricks-dolly-15k")):
        ctx = (r.get("context") or "").strip()
        if ctx:
            answer = extractive_answer(r["instruction"], ctx)
            if answer:
                yield _rec(f"dolly-{i}", ctx, r["instruction"].strip(), answer, [], "QA")


_span_adapter("dolly_extractive", ["dolly15k_instructions_restyled"], load_dolly_extractive,
              "databricks/databricks-dolly-15k", _dolly_hub,
              "Dolly instructions with a context; extractive faithful answers (input of the synthetic generator)")


# ---- validation and reporting -----------------------------------------------------------------------------

class SpanDataReport:
    """Counts (and example ids) of every problem found while cleaning span records, per source."""

    def __init__(self, max_ids: int = 10):
        self.counts: dict[str, Counter] = defaultdict(Counter)
        self.ids: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        self.kept: Counter = Counter()
        self.dropped: Counter = Counter()
        self.max_ids = max_ids

    def add(self, source: str, problem: str, rid: str) -> None:
        self.counts[source][problem] += 1
        if len(self.ids[source][problem]) < self.max_ids:
            self.ids[source][problem].append(rid)

    def to_dict(self) -> dict:
        return {src: {"kept": self.kept[src], "dropped": self.dropped[src],
                      "problems": {p: {"count": n, "ids": self.ids[src][p]} for p, n in c.most_common()}}
                for src, c in sorted({**{s: self.counts[s] for s in self.kept}, **self.counts}.items())}

    def summary(self) -> str:
        lines = []
        for src, info in self.to_dict().items():
            if info["kept"] or info["dropped"]:
                lines.append(f"{src}: kept {info['kept']}, dropped {info['dropped']}")
            else:
                lines.append(f"{src}:")
            for p, d in info["problems"].items():
                lines.append(f"    {d['count']:5d} x {p}  (e.g. {', '.join(d['ids'][:3])})")
        return "\n".join(lines)


SPAN_FIELDS = {f.name for f in dataclasses.fields(SpanRecord)} - {"meta"}  # the rest of a row goes to meta


def clean_span_records(records: list[dict], source: str, report: SpanDataReport,
                       require_context: bool = True) -> list[SpanRecord]:
    """Validate raw span rows into `SpanRecord`s; fix what can be fixed (relocated/merged spans), drop the rest;
    every case is reported.

    Dropped: `_problem` set by the adapter, missing/non-string answer or context, empty answer, spans that
    cannot be placed in the answer. Kept with a note: spans relocated by their text, overlapping spans merged.
    Kept records get `label` (1 when the answer has a span) and `source`; other fields of the row go to `meta`.
    """
    kept = []
    for i, rec in enumerate(records):
        rid = str(rec.get("id") or f"{source}-{i}")
        if rec.get("id") is None:
            report.add(source, "missing_id (numbered)", rid)
        if rec.get("_problem"):
            report.add(source, rec["_problem"], rid)
            report.dropped[source] += 1
            continue
        answer = rec.get("answer")
        if not isinstance(answer, str):
            report.add(source, "missing answer", rid)
            report.dropped[source] += 1
            continue
        if not answer.strip():
            report.add(source, "empty answer", rid)
            report.dropped[source] += 1
            continue
        context = rec.get("context")
        if isinstance(context, (dict, list)):
            context = render_context(context)
        if context is not None and not isinstance(context, str):
            report.add(source, f"context is a {type(context).__name__}", rid)
            report.dropped[source] += 1
            continue
        if require_context and not (context or "").strip():
            report.add(source, "missing context", rid)
            report.dropped[source] += 1
            continue
        spans, problems = check_spans(answer, rec.get("spans") or [])
        for p in problems:
            report.add(source, p, rid)
        if set(problems) & FATAL_SPAN_PROBLEMS:
            report.dropped[source] += 1
            continue
        task = normalize_task_type(rec.get("task_type"))
        if rec.get("task_type") and task is None:
            report.add(source, f"unknown task_type {rec.get('task_type')!r} (no template)", rid)
        question = rec.get("question") or None
        if question is not None and not isinstance(question, str):
            question = str(question)
        meta = {k: v for k, v in rec.items() if k not in SPAN_FIELDS}
        kept.append(SpanRecord(context=context or "", answer=answer, question=question, spans=spans,
                               task_type=task, id=rid, label=int(bool(spans)), source=rec.get("source") or source,
                               meta=meta))
        report.kept[source] += 1
    return kept


def load_span_source(name: str, data_dir, report: SpanDataReport) -> list[SpanRecord]:
    """Load one span adapter, cleaned (context required unless the adapter says it has none), into `report`."""
    return get_adapter(name, kind="span").load(data_dir, report=report)


def read_span_file(path: Path, report: SpanDataReport, require_context: bool = True) -> list[SpanRecord]:
    """A JSONL file of span records (e.g. RUN_DIR/test.jsonl) or of RAGTruth-schema rows (response + labels)."""
    rows = list(read_jsonl(path))
    if rows and "response" in rows[0] and "answer" not in rows[0]:
        rows = [ragtruth_row_record(r) for r in rows]
    return clean_span_records(rows, path.stem, report, require_context=require_context)

