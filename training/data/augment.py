"""Shortcut-breaking rewrites for the Sentinel (docs/sentinel.md, "Breaking the shortcuts").

The local sources differ in style: fact-seeking prompts are mostly short questions from QA benchmarks and the
non-factual ones mostly imperatives ("Write ...", code tasks). A model can then separate the classes by form
instead of by what is asked. These rule-based rewrites put both labels in every style:

    rewrite              from   to     example
    pos_imperative       POS    POS    "What is photosynthesis?" -> "Explain what photosynthesis is."
    pos_preamble         POS    POS    "I'm studying for an exam and my notes are patchy. <question> Be precise."
    pos_document         POS    POS    "<pasted passage>\n\n<question>"
    pos_persona          POS    POS    "You are a knowledgeable librarian. <question>"
    pos_multi            POS    POS    "<question 1> Also, <question 2>"
    pos_options          POS    POS    "Who wrote Hamlet?\nA) Marlowe B) Shakespeare C) Jonson D) Kyd" (other answers of
                                       the same source as distractors)
    neg_question         NEG    NEG    "Write a poem about rain." -> "Can you write a poem about rain?"
    neg_preamble         NEG    NEG    "I'm working on a creative project. <task> Have fun with it."
    neg_document         NEG    NEG    "<pasted passage>\n\nRewrite the text above in a more formal tone."
    neg_task_document    NEG    NEG    "<pasted passage>\n\nWrite a limerick about a cat." (the record's own task)
    neg_persona          NEG    NEG    "You are a pirate captain; stay in character. <task>"
    neg_counterfactual   POS    NEG    "What is the Suez Canal?" -> "What would have happened if the Suez Canal had
                                       never been built?"
    neg_counterfactual_document POS NEG "<pasted passage>\n\nWhat if the events described above had never happened?"
    neg_creative_entity  POS    NEG    "Who was Marie Curie?" -> "Can you write a short poem about Marie Curie?"
    neg_premise          POS    NEG    "What is the Suez Canal?" -> "You discover a door in your basement that leads
                                       straight into the Suez Canal." (a story premise, WritingPrompts style)

`pos_options` exists because options marked a label: MMLU's knowledge subjects (positives) and its math
subjects (negatives) are the only prompts with options, so holding out either half left options on one side
only. With it (and the rule-generated math of training.data.math_prompts, some with options) both labels have
options in every fold.

The four from POS to NEG derive a negative from a positive's topic: the same entity on both sides of the boundary, so
the topic alone cannot decide. Every rewrite's output label is fixed by the rule (docs/sentinel.md), never guessed.

Rewrites are applied to the training split only, after splitting, and draw passages only from that split, so
nothing of a dev, test or held-out source leaks into training.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from training.data.math_prompts import format_options
from training.data.records import PromptRecord

POS, NEG = 1, 0

_WH = r"(who|what|when|where|which|whose|whom|why|how)"
_AUX = r"(is|are|was|were|do|does|did|can|could|has|have|had|will|would|should)"

STYLES = ("question", "imperative", "long", "document")


def prompt_style(text: str) -> str:
    """The surface style a prompt has: document (a pasted passage), long (3+ sentences), question, imperative."""
    t = text.strip()
    blocks = [b for b in re.split(r"\n\s*\n", t) if b.strip()]
    if len(t) > 600 or (len(blocks) > 1 and max(len(b) for b in blocks) >= 200):
        return "document"
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", t) if s.strip()]
    if len(sentences) >= 3 or len(t) > 240:
        return "long"
    if t.endswith("?") or re.match(rf"^{_WH}\b|^{_AUX}\b", t, re.IGNORECASE):
        return "question"
    return "imperative"


# ---- helpers ----------------------------------------------------------------------------------------------------

def _lower_first(s: str) -> str:
    return s[:1].lower() + s[1:] if s[:2] != s[:2].upper() else s


def _strip_end(s: str) -> str:
    return s.strip().rstrip("?.! ").strip()


def _with_preamble(text, rng, preambles, codas, label):
    """`text` between a random preamble and coda (the *_preamble rewrites); None for a pasted document."""
    if prompt_style(text) == "document":
        return None
    return f"{rng.choice(preambles)} {text.strip()} {rng.choice(codas)}", label


def _with_persona(text, rng, personas, label):
    """`text` after a random persona line (the *_persona rewrites)."""
    return f"{rng.choice(personas)} {text.strip()}", label


_ENTITY_RE = re.compile(r"^(what|who)\s+(is|are|was|were)\s+(.+?)\s*\?*$", re.IGNORECASE)


def entity_of(question: str) -> tuple[str, str, str] | None:
    """("what"|"who", copula, X) for a short "What is X?" / "Who was X?" question, else None."""
    q = question.strip()
    if "\n" in q or len(q) > 120:
        return None
    m = _ENTITY_RE.match(q)
    if not m:
        return None
    x = m.group(3).strip()
    words = x.split()
    if not 1 <= len(words) <= 8 or re.search(r"\b(if|when|that|which|who|because|and then)\b", x, re.IGNORECASE):
        return None
    if re.search(r"[?;:]", x):
        return None
    return m.group(1).lower(), m.group(2).lower(), x


# ---- positive rewrites (keep FACT_CHECK_NEEDED) ------------------------------------------------------------------

def pos_imperative(text: str, rng: random.Random, ctx: _Context) -> tuple[str, int] | None:
    t = " ".join(text.split())
    if "\n" in text.strip() or len(t) > 300 or not t.endswith("?"):
        return None
    ent = entity_of(t)
    if ent:
        wh, cop, x = ent
        if wh == "who":
            out = rng.choice([f"Tell me who {x} {cop}.", f"Write a short biography of {x}.",
                              f"Give me some background on {x}.", f"Describe who {x} {cop} and why they matter."])
        else:
            out = rng.choice([f"Tell me about {x}.", f"Explain what {x} {cop}.", f"Give me a short overview of {x}.",
                              f"Write a short summary of the history of {x}.", f"Define {x}.",
                              f"Describe {x} in a few sentences."])
        return out, POS
    m = re.match(r"^how\s+(does|do)\s+(.+?)\s+work\s*\?$", t, re.IGNORECASE)
    if m:
        verb = "works" if m.group(1).lower() == "does" else "work"
        return rng.choice([f"Explain how {m.group(2)} {verb}.", f"Describe how {m.group(2)} {verb}, step by step."]), POS
    body = _lower_first(_strip_end(t))
    if re.match(rf"^{_WH}\b", body, re.IGNORECASE):
        return rng.choice([f"Tell me {body}.", f"I need to know {body}.", f"Find out {body}.",
                           f"Explain {body}.", f"Look this up for me: {body}.", f"Please answer: {body}."]), POS
    return rng.choice([f"Tell me whether {body}.", f"Check this for me: {body}.", f"Answer yes or no: {body}."]), POS


_POS_PREAMBLES = [
    "I'm studying for an exam tomorrow and my notes are patchy.", "My friend and I were arguing about this at dinner.",
    "I'm writing a report for work and need to get the facts right.", "Quick question for a pub quiz.",
    "I read something online and I'm not sure it's accurate.", "This came up while I was helping my kid with homework.",
    "I want to double-check something before I put it in a presentation.",
]
_POS_CODAS = ["Please be precise.", "Keep it short.", "Cite the key facts.", "Thanks!", "A brief answer is fine.",
              "Explain your answer in two or three sentences."]


def pos_preamble(text, rng, ctx):
    return _with_preamble(text, rng, _POS_PREAMBLES, _POS_CODAS, POS)


_POS_PERSONAS = ["You are a knowledgeable librarian.", "You are a helpful assistant that answers accurately.",
                 "Act as a history teacher and answer the question.", "You are a science tutor.",
                 "Pretend you are an encyclopedia.", "As an expert in this field, please answer."]


def pos_persona(text, rng, ctx):
    return _with_persona(text, rng, _POS_PERSONAS, POS)


def pos_document(text, rng, ctx):
    if prompt_style(text) == "document" or not ctx.documents:
        return None
    doc = rng.choice(ctx.documents)
    return rng.choice([f"{doc}\n\n{text.strip()}", (f"Here are my notes:\n\n{doc}\n\nUsing them and what you know, "
                       f"{_lower_first(text.strip())}"), f"{text.strip()}\n\nContext:\n{doc}"]), POS


def pos_multi(text, rng, ctx):
    if prompt_style(text) not in ("question", "imperative") or len(ctx.pos_short) < 2:
        return None
    other = rng.choice(ctx.pos_short)
    if other == text:
        return None
    return f"{text.strip()} Also, {_lower_first(other.strip())}", POS


def pos_options(text, rng, ctx):
    """A short question with four options: its own answer (meta "answer") and three answers of other questions of
    the same source, drawn from the training records only."""
    t = " ".join(text.split())
    if "\n" in text.strip() or len(t) > 200:
        return None
    source, answer = ctx.answer_of.get(text, ("", ""))
    pool = ctx.answer_pool.get(source, [])
    if not t or not answer or len(pool) < 10:
        return None
    numeric = bool(re.search(r"\d", answer))
    similar = [a for a in pool if bool(re.search(r"\d", a)) == numeric and a.lower() != answer.lower()]
    if len(similar) < 3:
        return None
    options = [answer, *rng.sample(similar, 3)]
    rng.shuffle(options)
    return f"{t}\n{format_options(options, rng)}", POS


# ---- negative rewrites (keep NO_FACT_CHECK_NEEDED) ---------------------------------------------------------------

_NEG_VERBS = r"(write|compose|create|generate|draft|design|rewrite|paraphrase|edit|translate|make|come up with|" \
             r"brainstorm|imagine|invent|describe|develop|construct|plan|suggest|give|tell|complete|implement|" \
             r"convert|format|summarize|list|produce|craft|turn|add|change|fix|solve|find|sort|reverse|return)"


def neg_question(text, rng, ctx):
    t = text.strip()
    first_line, _, rest = t.partition("\n")
    if first_line.endswith("?"):
        return None
    if re.match(rf"^(please\s+)?{_NEG_VERBS}\b", first_line, re.IGNORECASE):
        core = re.sub(r"^please\s+", "", _strip_end(first_line), flags=re.IGNORECASE)
        lead = rng.choice(["Can you", "Could you", "Would you", "Will you please", "Can you please"])
        q = f"{lead} {_lower_first(core)}?"
        return (q + ("\n" + rest if rest else "")), NEG
    if len(t) < 400 and "\n" not in t:  # a scenario (WritingPrompts): ask for the story as a question
        core = _strip_end(t)
        return rng.choice([f"Can you write a short story based on this prompt? {core}.",
                           f"Could you turn this into a story? {core}.",
                           f"What would a story look like where {_lower_first(core)}?"]), NEG
    return None


_NEG_PREAMBLES = ["I'm working on a creative project and could use some help.", "I need this for a side project.",
                  "My team asked me to put this together by tonight.", "Just for fun:",
                  "I'm practising for a coding interview.", "Here's a task for you."]
_NEG_CODAS = ["Have fun with it.", "Keep it under 200 words.", "Be creative!", "Make it engaging.",
              "Thanks in advance.", "Show your work."]


def neg_preamble(text, rng, ctx):
    return _with_preamble(text, rng, _NEG_PREAMBLES, _NEG_CODAS, NEG)


_NEG_PERSONAS = ["You are a pirate captain; stay in character.", "Pretend you are a medieval bard.",
                 "You are a playful storyteller for children.", "Act as my writing partner.",
                 "You are a senior software engineer pairing with me."]


def neg_persona(text, rng, ctx):
    return _with_persona(text, rng, _NEG_PERSONAS, NEG)


_DOC_TASKS = [
    "Rewrite the text above in a more formal tone.", "Proofread the paragraph above and fix any grammar mistakes.",
    "Translate the text above into French.", "Turn the text above into a bulleted list, keeping the wording.",
    "Rewrite this passage for a ten-year-old, without adding anything.", "Can you make the text above shorter?",
    "Change the text above into the passive voice.", "Could you format the text above as a table?",
]


def neg_task_document(text, rng, ctx):
    """The record's own non-factual task (a story, code, a calculation) beside a pasted passage it does not ask
    about: NEG by the rule, the task decides. pos_document's layouts on the other label, so that a pasted
    document never decides the label by itself (before, every passage + own-task prompt in training was POS)."""
    if prompt_style(text) == "document" or not ctx.documents:
        return None
    doc = rng.choice(ctx.documents)
    return rng.choice([f"{doc}\n\n{text.strip()}", (f"Here are my notes:\n\n{doc}\n\nUsing them and what you know, "
                       f"{_lower_first(text.strip())}"), f"{text.strip()}\n\nContext:\n{doc}"]), NEG


def neg_document(text, rng, ctx):
    """A pasted passage and a rewriting / formatting task on it (NEG by the rule). Uses the record's own passage
    when it has one, else one from the training split."""
    if not ctx.documents:
        return None
    doc = rng.choice(ctx.documents)
    task = rng.choice(_DOC_TASKS)
    return (f"{doc}\n\n{task}" if rng.random() < 0.6 else f"{task.replace('above', 'below')}\n\n{doc}"), NEG


_PP = {"wrote": "written", "invented": "invented", "discovered": "discovered", "founded": "founded",
       "built": "built", "painted": "painted", "composed": "composed", "designed": "designed", "created": "created"}


def _short_question(text: str) -> str | None:
    t = " ".join(text.split())
    return t if t.endswith("?") and len(t) <= 160 and "\n" not in text.strip() else None


def neg_counterfactual(text, rng, ctx):
    ent = entity_of(text)
    if not ent:
        t = _short_question(text)
        m = re.match(rf"^who\s+({'|'.join(_PP)})\s+(.+?)\s*\?$", t or "", re.IGNORECASE)
        if m:
            return f"What if {m.group(2)} had never been {_PP[m.group(1).lower()]}? How would things be different?", NEG
        if t and rng.random() < 0.5:
            return rng.choice([(f'Imagine the answer to "{t}" had turned out completely different. What would the '
                               f"world look like?"), f'Suppose nobody could ever answer "{t}" What would follow?']), NEG
        return None
    wh, _, x = ent
    if wh == "who":
        out = rng.choice([f"What if {x} had never been born? How would the world be different?",
                          f"Imagine {x} had lived in the year 3000. What would their life be like?",
                          f"What would have happened if {x} had chosen a completely different career?"])
    else:
        out = rng.choice([f"What would the world be like if {x} had never existed?",
                          f"What if {x} had been invented a thousand years earlier?",
                          f"Imagine a world without {x}. Describe a day in it.",
                          f"What would happen if {x} suddenly disappeared tomorrow?"])
    return out, NEG


_DOC_COUNTERFACTUALS = [
    "What if the events described above had never happened? How would things be different today?",
    "Imagine the opposite of what the text above says had happened. What would follow?",
    "Suppose everything in the passage above had taken place a hundred years earlier. What would have changed?",
    "What would have happened if the people in the text above had made the opposite decision?",
    "What if none of this had happened? Describe the world that would follow.",
]


def neg_counterfactual_document(text, rng, ctx):
    """A counterfactual beside a pasted passage, in pos_document's layouts: the positive's own counterfactual
    (neg_counterfactual) or one about the passage itself. NEG by the rule (hypotheticals and counterfactuals).
    Without it a "what if" question after a passage read as a question about the passage: of WizardLM's
    counterfactual prompts placed after a news article, the 2026-12-05 model kept 1 of 8 (docs/experiments.md)."""
    if prompt_style(text) == "document" or not ctx.documents:
        return None
    own = neg_counterfactual(text, rng, ctx) if rng.random() < 0.5 else None
    question = own[0] if own else rng.choice(_DOC_COUNTERFACTUALS)
    doc = rng.choice(ctx.documents)
    if not own:  # a question about "the text above" must come after it
        return f"{doc}\n\n{question}", NEG
    return rng.choice([f"{doc}\n\n{question}", f"Here are my notes:\n\n{doc}\n\n{question}",
                       f"{question}\n\nContext:\n{doc}"]), NEG


def neg_creative_entity(text, rng, ctx):
    ent = entity_of(text)
    if not ent:
        t = _short_question(text)
        if not t:
            return None
        return rng.choice([f'Write a short story that begins with a child asking: "{t}"',
                           f"Can you write a poem inspired by this question? {t}",
                           f'Write a dialogue between two friends arguing about "{t}" Make it funny.']), NEG
    x = ent[2]
    return rng.choice([f"Can you write a short poem about {x}?", f"Write a limerick about {x}.",
                       f"Compose a haiku about {x}.", f"Write a funny short story starring {x}.",
                       f"Could you write a song about {x}?"]), NEG


def neg_premise(text, rng, ctx):
    """A story premise about a positive's entity, stated the way r/WritingPrompts states them: no "write", no
    question, fiction by content ("You wake up as ..."). Creative writing by the rule, so a negative."""
    ent = entity_of(text)
    if not ent:
        return None
    wh, _, x = ent
    if wh == "who":
        templates = ["You wake up one morning in the body of {x}, and nobody believes you.",
                     "{X} walks into your coffee shop in 2031 and orders the strangest drink you have ever heard of.",
                     "You are {x}'s personal assistant, and today absolutely everything goes wrong.",
                     "A time machine brings {x} to a modern supermarket. Chaos follows.",
                     "You find a diary that claims {x} was secretly a time traveller, and the entries keep changing."]
    else:
        templates = ["You wake up one morning and {x} has vanished from the world. You are the only one who remembers it.",
                     "In a world where {x} never existed, a child finds the last trace of it in an attic.",
                     "You discover a door in your basement that leads straight into {x}.",
                     "It is the year 3000, and historians have gotten everything about {x} completely wrong.",
                     "After a strange accident you can talk to {x}, and it has a lot of complaints."]
    out = rng.choice(templates).format(x=x, X=x[:1].upper() + x[1:])
    return out, NEG


REWRITES: dict[str, tuple[int, Callable]] = {
    # name: (label of the records it applies to, function)
    "pos_imperative": (POS, pos_imperative),
    "pos_preamble": (POS, pos_preamble),
    "pos_document": (POS, pos_document),
    "pos_persona": (POS, pos_persona),
    "pos_multi": (POS, pos_multi),
    "pos_options": (POS, pos_options),
    "neg_question": (NEG, neg_question),
    "neg_preamble": (NEG, neg_preamble),
    "neg_document": (NEG, neg_document),
    "neg_task_document": (NEG, neg_task_document),
    "neg_persona": (NEG, neg_persona),
    "neg_counterfactual": (POS, neg_counterfactual),
    "neg_counterfactual_document": (POS, neg_counterfactual_document),
    "neg_creative_entity": (POS, neg_creative_entity),
    "neg_premise": (POS, neg_premise),
}
# What `data.augment.rewrites` applies unless a config lists its own. neg_counterfactual_document is opt-in: with
# it, WizardLM's counterfactuals after a news article went 1/8 -> 6/8, but the leave-one-family-out mean fell
# (exam knowledge 0.740 -> 0.655), so the recipe does not use it (2026-12-06, docs/experiments.md).
DEFAULT_REWRITES = tuple(name for name in REWRITES if name != "neg_counterfactual_document")


@dataclass
class _Context:
    documents: list[str] = field(default_factory=list)
    pos_short: list[str] = field(default_factory=list)
    answer_of: dict[str, tuple[str, str]] = field(default_factory=dict)  # text -> (source, its answer)
    answer_pool: dict[str, list[str]] = field(default_factory=dict)  # source -> distinct answers


_CODE_RE = re.compile(r"```|\bdef \w+\(|\bassert\b|\breturn\b|[{};]\s*$|^\s{4}\S", re.MULTILINE)


def _passage(rec: PromptRecord) -> str | None:
    """The pasted passage of a fact-seeking record with one (a short instruction and a passage separated by a
    blank line, e.g. Dolly with its context, BoolQ), or None. Code and creative texts are never used."""
    if rec.label != POS:
        return None
    blocks = [b.strip() for b in re.split(r"\n\s*\n", rec.text.strip()) if b.strip()]
    if len(blocks) != 2:
        return None
    short, long_ = sorted(blocks, key=len)
    long_ = re.sub(r"^(answer from this passage|passage|context)\s*:\s*", "", long_, flags=re.IGNORECASE)
    # at most 800 characters (~180 tokens): passage + instruction fit in the model's 256 tokens, whichever comes first
    if len(short) > 300 or not 200 <= len(long_) <= 800 or _CODE_RE.search(long_):
        return None
    return long_


# ---- config and driver -------------------------------------------------------------------------------------------

@dataclass
class AugmentConfig:
    """`data.augment` in the Sentinel config. Applied to the training split only."""

    enabled: bool = False
    rate: float = 0.1             # per rewrite: share of its eligible training records that get one rewritten copy
    rates: dict[str, float] = field(default_factory=dict)  # per-rewrite rate overrides
    rewrites: list[str] = field(default_factory=lambda: list(DEFAULT_REWRITES))
    max_total: int | None = None  # cap on added records (sampled by seed)

    def validate(self):
        unknown = sorted((set(self.rewrites) | set(self.rates)) - set(REWRITES))
        if unknown:
            raise ValueError(f"augment: unknown rewrite(s) {unknown}; known: {', '.join(REWRITES)}")
        if not all(0.0 <= r <= 1.0 for r in [self.rate, *self.rates.values()]):
            raise ValueError("augment.rate / rates: must be in [0, 1]")

    def rate_of(self, name: str) -> float:
        return self.rates.get(name, self.rate)


@dataclass
class BalanceConfig:
    """`data.balance`: make the label ratio similar in every prompt style (question, imperative, long, document)."""

    mode: Literal["none", "downsample", "upsample"] = "none"
    max_ratio: float = 1.5        # majority : minority inside a style, at most

    def validate(self):
        if self.max_ratio < 1.0:
            raise ValueError("balance.max_ratio: must be >= 1")


def augment_records(records: list[PromptRecord], cfg: AugmentConfig, seed: int) -> list[PromptRecord]:
    """New records (the originals are not included), each with `meta["augment"]` = the rewrite name and the
    origin's `source`. Deterministic for a seed and the same input."""
    if not cfg.enabled:
        return []
    rng = random.Random(seed)
    ordered = sorted(records, key=lambda r: (r.source, r.text))
    ctx = _Context(
        documents=sorted({p for r in ordered if (p := _passage(r))}),
        pos_short=[r.text for r in ordered if r.label == POS and prompt_style(r.text) == "question"],
    )
    for r in ordered:
        answer = " ".join(str(r.meta.get("answer") or "").split())
        if r.label == POS and answer and len(answer) <= 80:
            ctx.answer_of[r.text] = (r.source, answer)
            pool = ctx.answer_pool.setdefault(r.source, [])
            if answer not in pool:
                pool.append(answer)
    out: list[PromptRecord] = []
    seen = {r.text for r in records}
    for name in cfg.rewrites:
        label, fn = REWRITES[name]
        rate = cfg.rate_of(name)
        for rec in ordered:
            if rec.label != label or rec.meta.get("augment") or rng.random() >= rate:
                continue
            res = fn(rec.text, rng, ctx)
            if res is None:
                continue
            text, new_label = res
            if text in seen:
                continue
            seen.add(text)
            out.append(rec.replace(text=text, label=new_label, meta={**rec.meta, "augment": name}))
    if cfg.max_total is not None and len(out) > cfg.max_total:
        out = rng.sample(out, cfg.max_total)
    return out


def style_counts(records: list[PromptRecord]) -> dict[str, dict[int, int]]:
    counts: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        counts[prompt_style(r.text)][r.label] += 1
    return {s: dict(counts[s]) for s in STYLES if s in counts}


def balance_by_style(records: list[PromptRecord], cfg: BalanceConfig, seed: int) -> list[PromptRecord]:
    """Per style, cut the majority label to max_ratio x the minority (downsample) or repeat the minority up to
    majority / max_ratio (upsample). Styles with one label only are kept as they are."""
    if cfg.mode == "none":
        return list(records)
    rng = random.Random(seed)
    groups: dict[tuple[str, int], list[PromptRecord]] = defaultdict(list)
    for r in records:
        groups[(prompt_style(r.text), r.label)].append(r)
    out: list[PromptRecord] = []
    for style in STYLES:
        pos, neg = groups.get((style, POS), []), groups.get((style, NEG), [])
        if not pos or not neg:
            out += pos + neg
            continue
        small, big = sorted((pos, neg), key=len)
        if cfg.mode == "downsample":
            keep = min(len(big), math.ceil(cfg.max_ratio * len(small)))
            out += small + rng.sample(big, keep)
        else:
            want = max(len(small), math.ceil(len(big) / cfg.max_ratio))
            extra = [rng.choice(small) for _ in range(want - len(small))]
            out += big + small + extra
    rng.shuffle(out)
    return out
