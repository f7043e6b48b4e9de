"""Declared model input formats: how the runtime feeds a model is read from its export, never guessed.

An export dir may hold FORMAT_FILE (`halugate_format.json`, written by `training.export --input-format ...`):

    {"task": "detector", "input_format": "lettucedetect", "lang": "en", "source_labels": ["LABEL_0", "LABEL_1"]}

Without the file a model is in halugate's own format (`halugate`: inference.spans, windows of
inference.windowing). `hallucination_model.input_format` in the runtime config may name the format instead
(for a checkpoint read with backend torch, which has no export).

The `lettucedetect` Detector format is lettucedetect 0.2.3's `TransformerDetector` (KRLabsOrg/LettuceDetect,
lettucedetect/detectors/transformer.py and prompt_utils.py), reproduced with `tokenizers` alone:

- the prompt: the passages numbered "passage 1: ...", one per line, in the QA template when there is a question
  (`question` not None) and in the summary template otherwise (the templates of its prompts/ folder, below);
- the input: the tokenizer's own pair encoding of (prompt, answer), the prompt cut from its end when the pair is
  longer than `max_length` (transformers' truncation="only_first"); no token types are fed;
- the answer tokens: the last `len(answer tokens)` before the closing special token;
- a context longer than `max_length`: the passages grouped greedily into chunks whose prompt fits beside the
  answer (lettuce_passage_groups), each chunk a prompt of its own, and per answer token the highest
  P(hallucinated) over the chunks;
- spans (lettuce_spans): consecutive flagged answer tokens, from the first one's start to the last one's end,
  offsets relative to the first answer token's start, confidence = the highest token probability in the span.
  With one chunk a token is flagged by the argmax of its logits (P > 0.5 for a two-label model), with several
  by P >= 0.5 (the threshold is `threshold` of the config; 0.5 is lettucedetect's).

tests/test_published_models.py compares the spans with lettucedetect's on tiny random ModernBERT checkpoints.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from inference.spans import AnswerTooLongError, DetectorInput, tokenize_segment

FORMAT_FILE = "halugate_format.json"
FORMAT_TASKS = ("detector", "explainer", "sentinel")
INPUT_FORMATS = {"detector": ("halugate", "lettucedetect"), "explainer": ("halugate",), "sentinel": ("halugate",)}
DEFAULT_FORMAT = "halugate"
LETTUCE_MAX_LENGTH = 4096  # lettucedetect's TransformerDetector default

# ---- lettucedetect 0.2.3's prompt templates (lettucedetect/prompts/*.txt), verbatim ----------------------------
LETTUCE_PASSAGE_WORD = {
    'en': 'passage',
    'de': 'Passage',
    'fr': 'passage',
    'es': 'pasaje',
    'it': 'brano',
    'pl': 'fragment',
    'cn': '段落',
    'hu': 'szövegrészlet',
}
LETTUCE_QA_TEMPLATES = {
    'en': (
        'Briefly answer the following question:\n${question}\nBear in mind that'
        ' your response should be strictly based on the following'
        ' ${num_passages} passages:\n${context}\nIn case the passages do not'
        ' contain the necessary information to answer the question, please'
        ' reply with: "Unable to answer based on given passages."\noutput:'
    ),
    'de': (
        'Beantworte die folgende Frage kurz:\n${question}\nBeachte, dass deine'
        ' Antwort nur auf den folgenden ${num_passages} Passagen basieren'
        ' soll:\n${context}\nFalls die Passagen nicht die notwendigen'
        ' Informationen zur Beantwortung der Frage enthalten, antworte bitte'
        ' mit: "Kann aufgrund der gegebenen Passagen nicht beantwortet'
        ' werden."\nAusgabe:'
    ),
    'fr': (
        'Réponds brièvement à la question suivante :\n${question}\nNote que ta'
        ' réponse doit être basée uniquement sur les ${num_passages} passages'
        ' suivants :\n${context}\nSi les passages ne contiennent pas les'
        " informations nécessaires pour répondre à la question, réponds s'il te"
        ' plaît par : "Impossible de répondre sur la base des passages'
        ' fournis."\nSortie : '
    ),
    'es': (
        'Responde a la siguiente pregunta brevemente:\n${question}\nTen en cuenta'
        ' que tu respuesta debe basarse únicamente en los siguientes'
        ' ${num_passages} pasajes:\n${context}\nSi los pasajes no contienen la'
        ' información necesaria para responder a la pregunta, por favor'
        ' responde con: "No se puede responder con base en los pasajes'
        ' proporcionados."\nSalida: '
    ),
    'it': (
        'Rispondi alla seguente domanda in modo breve:\n${question}\nTieni'
        ' presente che la tua risposta deve basarsi solo sui seguenti'
        ' ${num_passages} passaggi:\n${context}\nSe i passaggi non contengono le'
        ' informazioni necessarie per rispondere alla domanda, per favore'
        ' rispondi con: "Non può essere risposto in base ai passaggi'
        ' forniti."\nRisposta:\n'
    ),
    'pl': (
        'Zwięźle odpowiedz na następujące pytanie:\n${question}\nPamiętaj, że'
        ' Twoja odpowiedź powinna opierać się wyłącznie na następujących'
        ' ${num_passages} fragmentach:\n${context}\nJeśli fragmenty nie zawierają'
        ' informacji niezbędnych do udzielenia odpowiedzi na pytanie,'
        ' odpowiedz: "Nie można odpowiedzieć na podstawie podanych'
        ' fragmentów."\noutput: '
    ),
    'cn': (
        '请简短回答以下问题：\n${question}\n请注意，您的回'
        '答应严格基于以下${num_passages}段落：\n${c'
        'ontext}\n如果段落中不包含回答问题所需的信息，请回复："基于给定段落无法回答。"\n输出：\n'
    ),
    'hu': (
        'Röviden válaszolj az alábbi kérdésre:\n${question}\nVedd figyelembe,'
        ' hogy a válaszod kizárólag az alábbi ${num_passages} szövegrészletre'
        ' támaszkodjon:\n${context}\nHa a szövegrészletek nem tartalmazzák a'
        ' kérdés megválaszolásához szükséges információt, válaszolj így: "Nem'
        ' tudok válaszolni a megadott szövegrészletek alapján."\noutput:'
    ),
}
LETTUCE_SUMMARY_TEMPLATES = {
    'en': (
        'Summarize the following text:\n${text}\noutput:'
    ),
    'de': (
        'Fasse den folgenden Text zusammen:\n${text}\nAusgabe:\n'
    ),
    'fr': (
        'Résume le texte suivant :\n${text}\nSortie : '
    ),
    'es': (
        'Resume el siguiente texto:\n${text}\nSalida: '
    ),
    'it': (
        'Riassumi il seguente testo:\n${text}\nRisposta: '
    ),
    'pl': (
        'Streść następujący tekst:\n${text}\nWynik: '
    ),
    'cn': (
        '请总结以下文本：\n${text}\n输出：\n'
    ),
    'hu': (
        'Foglalja össze az alábbi szöveget:\n${text}\noutput:\n\n\n'
    ),
}


@dataclass(frozen=True)
class ModelFormat:
    """What a model's export declares about its input (FORMAT_FILE); the default: halugate's own format."""

    task: str = "detector"
    input_format: str = DEFAULT_FORMAT
    lang: str = "en"
    source_labels: list[str] | None = None  # the checkpoint's own label names, where the export renamed them
    source: str = ""  # the file it was read from ("" = none, the default)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.task not in FORMAT_TASKS:
            raise ValueError(f"task: one of {', '.join(FORMAT_TASKS)}, got {self.task!r}")
        if self.input_format not in INPUT_FORMATS[self.task]:
            raise ValueError(f"input_format: one of {', '.join(INPUT_FORMATS[self.task])} for a {self.task}, "
                             f"got {self.input_format!r}")
        if self.input_format == "lettucedetect" and self.lang not in LETTUCE_PASSAGE_WORD:
            raise ValueError(f"lang: lettucedetect has prompts for {', '.join(LETTUCE_PASSAGE_WORD)}, "
                             f"got {self.lang!r}")

    def to_dict(self) -> dict:
        out = {"task": self.task, "input_format": self.input_format, "lang": self.lang}
        if self.source_labels is not None:
            out["source_labels"] = list(self.source_labels)
        return {**out, **self.extra}


def read_format(model_dir: str | Path | None) -> ModelFormat | None:
    """The declaration in MODEL_DIR/FORMAT_FILE, or None when there is none; ValueError naming the file when
    it is unreadable or declares something unknown."""
    path = Path(model_dir) / FORMAT_FILE if model_dir else None
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError("expected a JSON object")
        known = {"task", "input_format", "lang", "source_labels"}
        return ModelFormat(task=data.get("task", "detector"), input_format=data.get("input_format", DEFAULT_FORMAT),
                           lang=data.get("lang", "en"), source_labels=data.get("source_labels"), source=str(path),
                           extra={k: v for k, v in data.items() if k not in known})
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{path}: unreadable model format declaration ({exc})") from None


def detector_format(settings, model_dir: str | Path | None) -> ModelFormat:
    """The Detector's format in force: `settings.input_format` (hallucination_model) when it names one, else what
    the model's export declares, else halugate's own."""
    declared = read_format(model_dir)
    if declared is not None and declared.task != "detector":
        raise ValueError(f"{declared.source}: declares a {declared.task} model, not a detector")
    wanted = getattr(settings, "input_format", "auto")
    if wanted == "auto":
        return declared or ModelFormat()
    if declared is None:
        return ModelFormat(input_format=wanted)
    return ModelFormat(input_format=wanted, lang=declared.lang, source_labels=declared.source_labels,
                       source=declared.source, extra=declared.extra)


def write_format(out_dir: str | Path, fmt: ModelFormat) -> Path:
    path = Path(out_dir) / FORMAT_FILE
    path.write_text(json.dumps(fmt.to_dict(), indent=2) + "\n", encoding="utf-8")
    return path


# ---- lettucedetect --------------------------------------------------------------------------------------------

def lettuce_prompt(passages: Sequence[str], question: str | None, lang: str = "en") -> str:
    """PromptUtils.format_context: the numbered passages in the QA template (with a question) or the summary
    template (question None)."""
    word = LETTUCE_PASSAGE_WORD[lang]
    block = "\n".join(f"{word} {i + 1}: {p}" for i, p in enumerate(passages))
    if question is None:
        return Template(LETTUCE_SUMMARY_TEMPLATES[lang]).substitute(text=block)
    return Template(LETTUCE_QA_TEMPLATES[lang]).substitute(question=question, num_passages=len(passages),
                                                           context=block)


def _n_tokens(tokenizer, text: str) -> int:
    return len(tokenize_segment(tokenizer, text)[0])


def lettuce_passage_groups(tokenizer, passages: Sequence[str], question: str | None, answer: str,
                           max_length: int, lang: str = "en") -> list[list[str]]:
    """TransformerDetector._group_passages_into_chunks: all passages when their prompt fits beside the answer
    (max_length - answer tokens - 3), else greedy groups of whole passages within the budget left by the
    template; one group (truncated later) when the template and answer alone leave no room."""
    passages = list(passages)
    total_budget = max_length - _n_tokens(tokenizer, answer) - 3
    if _n_tokens(tokenizer, lettuce_prompt(passages, question, lang)) <= total_budget:
        return [passages]
    passage_budget = total_budget - _n_tokens(tokenizer, lettuce_prompt([""], question, lang))
    if passage_budget <= 0:
        return [passages]
    word = LETTUCE_PASSAGE_WORD[lang]
    counts = [_n_tokens(tokenizer, f"{word} {i + 1}: {p}") for i, p in enumerate(passages)]
    groups: list[list[str]] = []
    current: list[str] = []
    used = 0
    for passage, count in zip(passages, counts):
        step = count + (1 if current else 0)  # +1 for the newline between passages
        if used + step > passage_budget and current:
            groups.append(current)
            current, used, step = [], 0, count
        current.append(passage)
        used += step
    if current:
        groups.append(current)
    return groups or [passages]


def lettuce_encode(tokenizer, prompt: str, answer: str, max_length: int) -> DetectorInput:
    """HallucinationDataset.prepare_tokenized_input: the pair (prompt, answer) with the tokenizer's own special
    tokens, the prompt cut from its end to fit `max_length`; the answer tokens are the last ones before the closing
    special token. AnswerTooLongError when the answer alone does not fit."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    ans = backend.encode(answer, add_special_tokens=False)
    first = backend.encode(prompt, add_special_tokens=False)
    room = max_length - backend.num_special_tokens_to_add(True) - len(ans.ids)
    truncated = len(first.ids) > room
    if truncated:
        if room <= 0:
            raise AnswerTooLongError(len(ans.ids) + backend.num_special_tokens_to_add(True), max_length)
        first.truncate(room)
    enc = backend.post_process(first, ans, True)
    ids = list(enc.ids)
    n_answer = len(ans.ids)
    answer_start = len(ids) - n_answer - 1
    offsets = [tuple(o) for o in enc.offsets[answer_start:answer_start + n_answer]]
    return DetectorInput(input_ids=ids, attention_mask=[1] * len(ids), token_type_ids=[0] * len(ids),
                         answer_start=answer_start, answer_offsets=offsets, context_truncated=truncated,
                         meta={"format": "lettucedetect", "prompt_tokens": len(first.ids)})


def lettuce_windows(tokenizer, passages: Sequence[str], question: str | None, answer: str, *, max_length: int,
                    lang: str = "en") -> list[DetectorInput]:
    """One DetectorInput per passage chunk (TransformerDetector.predict), all with the same answer tokens."""
    groups = lettuce_passage_groups(tokenizer, passages, question, answer, max_length, lang)
    windows = [lettuce_encode(tokenizer, lettuce_prompt(g, question, lang), answer, max_length) for g in groups]
    n_context = _n_tokens(tokenizer, "\n".join(passages))
    for w in windows:  # every chunk is read whole: the Detector sees all of the context
        w.context_tokens, w.context_token_range = n_context, (0, n_context)
    return windows


def lettuce_spans(answer: str, answer_offsets: Sequence[tuple[int, int]], probs: Sequence[float],
                  n_windows: int = 1, threshold: float = 0.5) -> list[dict]:
    """TransformerDetector's spans from per-answer-token P(hallucinated): `_predict_single` for one chunk (a token
    is flagged when P > threshold: the argmax of a two-label model at 0.5; tokens with no characters are skipped),
    `_build_spans_from_tokens` for several (P >= threshold; the answer's offsets without its empty tokens are
    paired with the probabilities by position, as there). Offsets are relative to the first answer token's start;
    confidence is the highest probability in the span."""
    offsets = [tuple(o) for o in answer_offsets]
    base = offsets[0][0] if offsets else 0
    if n_windows <= 1:
        pairs = [((s - base, e - base), float(p) > threshold, float(p))
                 for (s, e), p in zip(offsets, probs) if s != e]
    else:
        nonempty = [(s - base, e - base) for s, e in offsets if s != e]
        pairs = [(nonempty[k], float(p) >= threshold, float(p)) for k, p in enumerate(probs) if k < len(nonempty)]
    spans: list[dict] = []
    current: dict | None = None
    for (start, end), flagged, p in pairs:
        if flagged:
            if current is None:
                current = {"start": start, "end": end, "confidence": p}
            else:
                current["end"] = end
                current["confidence"] = max(current["confidence"], p)
        elif current is not None:
            spans.append(current)
            current = None
    if current is not None:
        spans.append(current)
    return [{"start": s["start"], "end": s["end"], "text": answer[s["start"]:s["end"]],
             "confidence": s["confidence"], "max_prob": s["confidence"]} for s in spans]
