"""Prompt adapters for the Sentinel: `PromptRecord`s (text, label, source; dataset extras in `meta`).

The labelling rule every adapter follows is written down in docs/sentinel.md: a prompt needs fact-checking when
its answer asserts checkable facts about the world (who / what / when / where / how many, definitions,
explanations of real things, advice resting on facts); creative writing, role-play, code, math and logic,
rewriting of given text, opinions and hypotheticals / counterfactuals do not.

label 1 = FACT_CHECK_NEEDED (fact-seeking prompts), 0 = NO_FACT_CHECK_NEEDED (creative, coding, rewriting).
Each adapter's label comes from what the dataset *is* (a QA benchmark, a creative-writing corpus), never from
a guess about a single row, except where the docstring says a written rule selects rows (Alpaca, WizardLM).
"""

from __future__ import annotations

import re
from pathlib import Path

from training.data.base import Adapter, hub_rows, read_csv, read_json, read_jsonl, register
from training.data.records import PromptRecord

POS, NEG = 1, 0


def _rec(text: str, label: int, **meta) -> PromptRecord:
    return PromptRecord(text.strip(), label, meta=meta)


def _first(answer) -> str:
    """A row's answer (the first of a list) for the options rewrite (training.data.augment.pos_options); ""
    when the row has none: the answer is optional metadata, never required."""
    if isinstance(answer, list):
        answer = answer[0] if answer else ""
    return str(answer or "")


def _prompt_adapter(name, label, local_files, local, hub_id=None, hub=None, description=""):
    return register(Adapter(name=name, kind="prompt", local_files=local_files, load_local=local,
                            hub_id=hub_id, load_hub=hub, description=description, extra={"label": label}))


# ---- fact-seeking positives ----------------------------------------------------------------------------------

_prompt_adapter(
    "nq_open", POS, ["nq_open/NQ-open.dev.jsonl", "nq_open/NQ-open.efficientqa.dev.1.1.jsonl",
                     "nq_open/NQ-open.efficientqa.test.1.1.jsonl"],
    lambda d: (_rec(r["question"], POS, answer=_first(r.get("answer")))
               for f in ("NQ-open.dev.jsonl", "NQ-open.efficientqa.dev.1.1.jsonl", "NQ-open.efficientqa.test.1.1.jsonl")
               for r in read_jsonl(d / "nq_open" / f)),
    "google-research-datasets/nq_open",
    lambda: (_rec(r["question"], POS) for r in hub_rows("google-research-datasets/nq_open", split="train")),
    "Natural Questions open-domain questions",
)

_prompt_adapter(
    "webquestions", POS, ["webquestions/trainmodel.json", "webquestions/test.json"],
    lambda d: (_rec(r["qText"], POS, answer=_first(r.get("answers"))) for f in ("trainmodel.json", "test.json")
               for r in read_json(d / "webquestions" / f)),
    "stanfordnlp/web_questions",
    lambda: (_rec(r["question"], POS) for r in hub_rows("stanfordnlp/web_questions", split="train")),
    "WebQuestions (Freebase questions from Google Suggest)",
)


def _trivia_local(d: Path):
    for r in read_jsonl(d / "llm_foundry_eval_local_data/world_knowledge/triviaqa_sm_sub.jsonl"):
        q = re.sub(r"^Question:\s*", "", r["context"]).rsplit("\nAnswer:", 1)[0]
        yield _rec(q, POS, answer=_first(r.get("answer")))


_prompt_adapter(
    "triviaqa", POS, ["llm_foundry_eval_local_data/world_knowledge/triviaqa_sm_sub.jsonl"], _trivia_local,
    "mandarjoshi/trivia_qa",
    lambda: (_rec(r["question"], POS) for r in hub_rows("mandarjoshi/trivia_qa", "rc.nocontext", "train")),
    "TriviaQA questions",
)

_prompt_adapter(
    "jeopardy", POS, ["llm_foundry_eval_local_data/world_knowledge/jeopardy_all.jsonl"],
    lambda d: (_rec(f"{r['context'].split(':', 1)[-1].strip()} Who or what is it?", POS,
                    answer=_first(r.get("continuation")))
               for r in read_jsonl(d / "llm_foundry_eval_local_data/world_knowledge/jeopardy_all.jsonl")),
    description="Jeopardy clues turned into questions (clue + 'Who or what is it?')",
)

_prompt_adapter(
    "bigbench_qa_wikidata", POS, ["llm_foundry_eval_local_data/world_knowledge/bigbench_qa_wikidata.jsonl"],
    lambda d: (_rec(f"Complete the fact: {r['context']} ...", POS)
               for r in read_jsonl(d / "llm_foundry_eval_local_data/world_knowledge/bigbench_qa_wikidata.jsonl")),
    description="BIG-bench qa_wikidata fact completions",
)

_prompt_adapter(
    "truthfulqa", POS, ["truthfulqa/TruthfulQA.csv"],
    lambda d: (_rec(r["Question"], POS) for r in read_csv(d / "truthfulqa/TruthfulQA.csv")),
    "truthfulqa/truthful_qa",
    lambda: (_rec(r["question"], POS) for r in hub_rows("truthfulqa/truthful_qa", "generation", "validation")),
    "TruthfulQA questions",
)

_prompt_adapter(
    "simpleqa", POS, ["simpleqa/simple_qa_test_set.csv"],
    lambda d: (_rec(r["problem"], POS, answer=_first(r.get("answer")))
               for r in read_csv(d / "simpleqa/simple_qa_test_set.csv")),
    "basicv8vc/SimpleQA",
    lambda: (_rec(r["problem"], POS) for r in hub_rows("basicv8vc/SimpleQA", split="test")),
    "OpenAI SimpleQA short fact-seeking questions",
)

_prompt_adapter(
    "halueval_qa", POS, ["halueval/qa_data_first1000.json"],
    lambda d: (_rec(r["question"], POS, answer=_first(r.get("right_answer")))
               for r in read_jsonl(d / "halueval/qa_data_first1000.json")),
    "pminervini/HaluEval",
    lambda: (_rec(r["question"], POS) for r in hub_rows("pminervini/HaluEval", "qa", "data")),
    "HaluEval QA questions (HotpotQA-based)",
)

_HALUEVAL2_DOMAINS = ["Bio-Medical", "Education", "Finance", "Open-Domain", "Science"]
_prompt_adapter(
    "halueval2", POS, [f"halueval2/data/{d}.json" for d in _HALUEVAL2_DOMAINS],
    lambda d: (_rec(r["user_query"], POS, domain=dom) for dom in _HALUEVAL2_DOMAINS
               for r in read_json(d / f"halueval2/data/{dom}.json")),
    description="HaluEval 2.0 fact-seeking questions in five domains",
)

# Hub-only positives of the published recipe.
for _name, _hub, _cfg, _split, _field in [
    ("squad", "rajpurkar/squad", None, "train", "question"),
    ("hotpotqa", "hotpotqa/hotpot_qa", "distractor", "train", "question"),
    ("rag_dataset_12000", "neural-bridge/rag-dataset-12000", None, "train", "question"),
]:
    _prompt_adapter(_name, POS, [], None, _hub,
                    (lambda h=_hub, c=_cfg, s=_split, f=_field: (_rec(r[f], POS) for r in hub_rows(h, c, s))))


def _coqa_hub():
    for r in hub_rows("stanfordnlp/coqa", split="train"):
        for q in r["questions"][:1]:  # the first question is self-contained; later ones lean on the dialogue
            yield _rec(q, POS)


def _faithdial_hub():
    for r in hub_rows("McGill-NLP/FaithDial", split="train"):
        if r.get("history"):
            yield _rec(r["history"][-1], POS)


def _factchd_hub():
    for r in hub_rows("zjunlp/FactCHD", split="train"):
        yield _rec(r.get("query") or r.get("question") or "", POS)


_prompt_adapter("coqa", POS, [], None, "stanfordnlp/coqa", _coqa_hub)
_prompt_adapter("faithdial", POS, [], None, "McGill-NLP/FaithDial", _faithdial_hub)
_prompt_adapter("factchd", POS, [], None, "zjunlp/FactCHD", _factchd_hub)


# ---- non-factual negatives -----------------------------------------------------------------------------------

def _wp_clean(prompt: str) -> str:
    return re.sub(r"^\s*\[\s*\w+\s*\]\s*", "", prompt).replace(" ,", ",").replace(" .", ".").replace(" 's", "'s")


_prompt_adapter(
    "writingprompts", NEG, ["writingprompts_subset/gpt-4/train_orig.csv", "writingprompts_subset/gpt-4/test.csv"],
    lambda d: (_rec(_wp_clean(r["prompt"]), NEG) for f in ("train_orig.csv", "test.csv")
               for r in read_csv(d / "writingprompts_subset/gpt-4" / f)),
    "euclaise/writingprompts",
    lambda: (_rec(_wp_clean(r["prompt"]), NEG) for r in hub_rows("euclaise/writingprompts", split="train")),
    "r/WritingPrompts creative-writing prompts",
)

# Alpaca has no task-type column. This written rule keeps instructions whose first word asks for generation or
# transformation, which are non-factual by construction; it is a weak label, documented as such in the README.
ALPACA_NEGATIVE_VERBS = {
    "generate", "create", "write", "compose", "rewrite", "design", "suggest", "brainstorm", "edit", "imagine",
    "construct", "invent", "come", "make", "paraphrase", "rearrange", "change", "convert", "reword", "draft",
    "develop", "formulate", "translate", "shorten", "transform", "add", "complete", "format",
}


def _alpaca_rows(rows):
    for r in rows:
        instr = r["instruction"].strip()
        first = instr.split()[0].lower().strip(",.:") if instr else ""
        if first in ALPACA_NEGATIVE_VERBS:
            text = instr + (f"\n\n{r['input'].strip()}" if r.get("input", "").strip() else "")
            yield _rec(text, NEG)


_prompt_adapter(
    "alpaca", NEG, ["alpaca/alpaca_en_demo_1k.json"],
    lambda d: _alpaca_rows(read_json(d / "alpaca/alpaca_en_demo_1k.json")),
    "tatsu-lab/alpaca", lambda: _alpaca_rows(hub_rows("tatsu-lab/alpaca", split="train")),
    "Alpaca generation/transformation instructions (rule: first word in ALPACA_NEGATIVE_VERBS)",
)


def _self_instruct(d: Path):
    for r in read_jsonl(d / "self_instruct/user_oriented_instructions.jsonl"):
        inst = (r.get("instances") or [{}])[0].get("input", "").strip()
        yield _rec(r["instruction"] + (f"\n\n{inst}" if inst else ""), NEG)


_prompt_adapter(
    "self_instruct", NEG, ["self_instruct/user_oriented_instructions.jsonl"], _self_instruct,
    description="Self-Instruct user-oriented tasks (rewriting, drafting, app-style tasks)",
)

_prompt_adapter(
    "mbppplus", NEG, ["code_prompts/mbppplus.json"],
    lambda d: (_rec(v, NEG) for v in read_json(d / "code_prompts/mbppplus.json").values()),
    "evalplus/mbppplus", lambda: (_rec(r["prompt"], NEG) for r in hub_rows("evalplus/mbppplus", split="test")),
    "MBPP+ coding tasks",
)

_prompt_adapter(
    "humaneval", NEG, ["llm_foundry_eval_local_data/programming/human_eval.jsonl"],
    lambda d: (_rec(f"Complete this Python function:\n\n{r['prompt']}", NEG)
               for r in read_jsonl(d / "llm_foundry_eval_local_data/programming/human_eval.jsonl")),
    "openai/openai_humaneval",
    lambda: (_rec(f"Complete this Python function:\n\n{r['prompt']}", NEG)
             for r in hub_rows("openai/openai_humaneval", split="test")),
    "HumanEval function-completion prompts",
)

_prompt_adapter(
    "codesearchnet", NEG, ["codesearchnet_queries/queries.csv"],
    lambda d: (_rec(f"Write code to {r['query']}", NEG) for r in read_csv(d / "codesearchnet_queries/queries.csv")),
    "code-search-net/code_search_net",
    lambda: (_rec(f"Write a function: {r['func_documentation_string']}", NEG)
             for r in hub_rows("code-search-net/code_search_net", "python", "train")),
    "CodeSearchNet queries (local) / docstrings (Hub) as coding tasks",
)

# WizardLM test skills that are non-factual by nature (docs/sentinel.md: counterfactuals are negatives); the
# rest (Biology, History, Law, ...) are in WIZARDLM_FACTUAL_SKILLS, and mixed skills (Reasoning, Common-Sense,
# Computer Science, Multilingual, Ethics, Philosophy, Toxicity) are in neither. Both WizardLM adapters are
# out-of-distribution tests: the offline recipe never trains on them.
WIZARDLM_NEGATIVE_SKILLS = {
    "Writting", "Code Generation", "Code Debug", "Roleplay", "Complex Format", "Academic Writing", "Math",
    "Counterfactual",
}
_prompt_adapter(
    "wizardlm_nonfactual", NEG, ["chat_eval_prompts/WizardLM_testset.jsonl"],
    lambda d: (_rec(r["Instruction"], NEG, skill=r["Skill"])
               for r in read_jsonl(d / "chat_eval_prompts/WizardLM_testset.jsonl")
               if r["Skill"] in WIZARDLM_NEGATIVE_SKILLS),
    description=f"WizardLM test prompts with skill in {sorted(WIZARDLM_NEGATIVE_SKILLS)}",
)

_DOLLY_NEGATIVE = {"creative_writing", "brainstorming"}
_prompt_adapter(
    "dolly_creative", NEG, [], None, "databricks/databricks-dolly-15k",
    lambda: (_rec(r["instruction"], NEG) for r in hub_rows("databricks/databricks-dolly-15k", split="train")
             if r["category"] in _DOLLY_NEGATIVE),
    "Dolly creative_writing and brainstorming (Hub only: the local copy has no category column)",
)

# WizardLM test skills that ask for knowledge; not in any training mix, used as an out-of-distribution check
# of the Sentinel's recall (`python -m eval.sentinel --model RUN_DIR --data wizardlm_factual`).
WIZARDLM_FACTUAL_SKILLS = {
    "Biology", "Chemistry", "Physics", "History", "Law", "Medicine", "Literature", "Entertainment", "Art",
    "Music", "Economy", "Sport", "Technology", "TruthfulQA",
}
_prompt_adapter(
    "wizardlm_factual", POS, ["chat_eval_prompts/WizardLM_testset.jsonl"],
    lambda d: (_rec(r["Instruction"], POS, skill=r["Skill"])
               for r in read_jsonl(d / "chat_eval_prompts/WizardLM_testset.jsonl")
               if r["Skill"] in WIZARDLM_FACTUAL_SKILLS),
    description=f"WizardLM test prompts with skill in {sorted(WIZARDLM_FACTUAL_SKILLS)}",
)


# Long prompts (docs/sentinel.md, "Long prompts"): every WizardLM test prompt beside a pasted news article, one of
# RAGTruth's Summary contexts of at least LONG_PROMPT_MIN_CHARS (~650 tokens: more than the Sentinel reads, at
# 256 or 512 tokens), before the prompt (`after_doc`: the request comes last, as when a user pastes a document
# and asks) or after it (`before_doc`). The label stays the prompt's: a pasted document does not change what is
# asked. Test only, like the WizardLM sets; the Sentinel never trains on RAGTruth contexts.
LONG_PROMPT_MIN_CHARS = 3000


def _long_documents(d: Path) -> list[str]:
    from training.data.spans import load_ragtruth_subset_folder  # the span layer reads the RAGTruth files

    docs = {r["source_id"]: r["context"] for r in load_ragtruth_subset_folder(d / "ragtruth_test_subset")
            if r.get("task_type") == "Summary" and len(r.get("context") or "") >= LONG_PROMPT_MIN_CHARS}
    return [docs[k] for k in sorted(docs)]


def _wizardlm_with_document(d: Path, skills: set[str], label: int, doc_first: bool):
    docs = _long_documents(d)
    rows = [r for r in read_jsonl(d / "chat_eval_prompts/WizardLM_testset.jsonl") if r["Skill"] in skills]
    for i, r in enumerate(rows):
        doc, prompt = docs[i % len(docs)], r["Instruction"].strip()
        yield _rec(f"{doc}\n\n{prompt}" if doc_first else f"{prompt}\n\n{doc}", label, skill=r["Skill"])


for _name, _skills, _label in (("wizardlm_factual", WIZARDLM_FACTUAL_SKILLS, POS),
                               ("wizardlm_nonfactual", WIZARDLM_NEGATIVE_SKILLS, NEG)):
    for _suffix, _doc_first in (("after_doc", True), ("before_doc", False)):
        _prompt_adapter(
            f"{_name}_{_suffix}", _label,
            ["chat_eval_prompts/WizardLM_testset.jsonl", "ragtruth_test_subset"],
            lambda d, s=_skills, lab=_label, first=_doc_first: _wizardlm_with_document(d, s, lab, first),
            description=(f"{_name} prompts {'after' if _doc_first else 'before'} a pasted news article of "
                         f">= {LONG_PROMPT_MIN_CHARS} characters (test only)"),
        )


# ---- more local sources (docs/sentinel.md) -------------------------------------------------------------------

def _haluquestqa(d: Path):
    for r in read_csv(d / "haluquestqa/HaluQuestQA.csv", delimiter="\t"):
        q = (r.get("question_text") or "").strip()
        if q:
            yield _rec(q, POS, category=r.get("category", ""))


_prompt_adapter(
    "haluquestqa_questions", POS, ["haluquestqa/HaluQuestQA.csv"], _haluquestqa,
    description="HaluQuestQA long-form 'explain like I'm five' questions (why / how explanations of real things)",
)


def _foundry_questions(d: Path, rel: str):
    for r in read_jsonl(d / "llm_foundry_eval_local_data" / rel):
        yield re.sub(r"^Question:\s*", "", r["query"]).strip(), r


_prompt_adapter(
    "arc", POS, ["llm_foundry_eval_local_data/world_knowledge/arc_easy.jsonl",
                 "llm_foundry_eval_local_data/world_knowledge/arc_challenge.jsonl"],
    lambda d: (_rec(q, POS) for rel in ("world_knowledge/arc_easy.jsonl", "world_knowledge/arc_challenge.jsonl")
               for q, _ in _foundry_questions(d, rel)),
    description="ARC easy + challenge grade-school science questions",
)


def _boolq(d: Path):
    for q, _ in _foundry_questions(d, "reading_comprehension/boolq.jsonl"):
        passage, _, question = q.rpartition("\nQuestion:")
        passage = re.sub(r"^Passage:\s*", "", passage).strip()
        question = question.strip().rstrip("?") + "?"
        if passage and question:
            # question first: a passage-first prompt longer than the model's max_length would lose the question
            yield _rec(f"{question[:1].upper()}{question[1:]}\n\nAnswer from this passage: {passage}", POS)


_prompt_adapter(
    "boolq", POS, ["llm_foundry_eval_local_data/reading_comprehension/boolq.jsonl"], _boolq,
    description="BoolQ yes/no questions followed by their pasted Wikipedia passage",
)


def _misconceptions(d: Path):
    for q, _ in _foundry_questions(d, "world_knowledge/bigbench_misconceptions.jsonl"):
        m = re.search(r"\nQ:\s*(.+?)\nA:", q, re.DOTALL)
        if m:
            yield _rec(f"Is this true or false? {m.group(1).strip()}", POS)


_prompt_adapter(
    "bigbench_misconceptions", POS, ["llm_foundry_eval_local_data/world_knowledge/bigbench_misconceptions.jsonl"],
    _misconceptions, description="BIG-bench misconceptions: is this statement true? (fact verification)",
)

# MMLU subjects by the rule: math and formal logic are negatives (the answer is derived, not looked up); the
# knowledge subjects are positives; physics / chemistry calculations and the ethics subjects are in neither.
MMLU_NEGATIVE_SUBJECTS = {
    "abstract_algebra", "college_mathematics", "elementary_mathematics", "high_school_mathematics",
    "high_school_statistics", "formal_logic",
}
MMLU_EXCLUDED_SUBJECTS = {
    "college_physics", "high_school_physics", "conceptual_physics", "college_chemistry", "high_school_chemistry",
    "moral_scenarios", "moral_disputes", "business_ethics", "econometrics", "machine_learning",
    "college_computer_science", "high_school_computer_science", "electrical_engineering", "professional_accounting",
}


def _mmlu(d: Path, negative: bool):
    for path in sorted((d / "mmlu/data/test").glob("*_test.csv")):
        subject = path.name[: -len("_test.csv")]
        if subject in MMLU_EXCLUDED_SUBJECTS or (subject in MMLU_NEGATIVE_SUBJECTS) != negative:
            continue
        for row in read_csv(path, fieldnames=["q", "a", "b", "c", "d", "answer"]):
            options = " ".join(f"{k}) {row[k.lower()].strip()}" for k in "ABCD")
            yield _rec(f"{row['q'].strip()}\n{options}", NEG if negative else POS, subject=subject)


_prompt_adapter(
    "mmlu_knowledge", POS, ["mmlu/data/test"], lambda d: _mmlu(d, negative=False),
    description="MMLU test questions (with their options) from the knowledge subjects (history, law, medicine, ...)",
)
_prompt_adapter(
    "mmlu_math", NEG, ["mmlu/data/test"], lambda d: _mmlu(d, negative=True),
    description=f"MMLU test questions from the math and formal-logic subjects {sorted(MMLU_NEGATIVE_SUBJECTS)}",
)


# Rule-generated math (training.data.math_prompts): math in every surface style, options included, so that
# options do not mark a label wherever one half of MMLU is held out. No files; the same prompts offline and
# with the Hub.
def _math_records():
    from training.data.math_prompts import math_prompts

    return (_rec(t, NEG) for t in math_prompts(2000, seed=0))


_prompt_adapter("synthetic_math", NEG, [], lambda d: _math_records(), None, _math_records,
                "rule-generated math prompts (arithmetic to calculus, word problems, logic; some with options)")


# Dolly-15k (local copy: instruction + context, no category column). Rows are labelled by the written rule
# `dolly_label` (docs/sentinel.md); rows it cannot decide (recommendations, "best X", open advice) are dropped.
_CREATIVE_OBJECTS = (
    r"(stor(y|ies)|poems?|haikus?|limericks?|sonnets?|songs?|lyrics|raps?|jokes?|letters?|e-?mails?|tweets?|"
    r"posts?|speech|press release|ad|advertisement|slogan|script|dialogue|scene|fable|tale|toast|invitation|"
    r"pitch|cover letter|product description|review|essay|blog|riddle|greeting|message|note|bio)"
)
_DOLLY_NEG_PATTERNS = [
    rf"^(please\s+)?(write|compose|draft|create|generate|pen)\b.{{0,60}}\b{_CREATIVE_OBJECTS}\b",
    r"^(please\s+)?(brainstorm|imagine|pretend|suppose|invent|come up with|think of|make up)\b",
    r"\b(ideas? (for|on|about|to)|give me (some )?ideas|suggest (some |a )?names?)\b",
    r"\bwhat if\b", r"\bwhat would (happen|you do|it be like|the world)\b", r"\bif you (were|could|had)\b",
    r"\bhypothetical", r"\bin an alternate\b",
    r"\b(your favou?rite|what do you think|do you (think|like|prefer|believe)|in your opinion|would you rather)\b",
    r"^(you are|act as|play the role|role-?play)\b",
    r"^(please\s+)?(rewrite|paraphrase|rephrase|reword|proofread|edit|shorten|translate)\b",
]
_DOLLY_DROP_PATTERNS = [
    r"\b(best|worst|greatest|favou?rite|should i|should we|i should|recommend|tips?|advice|how (can|do|should) i)\b",
    r"\b(ways|things|ideas|activities|places|reasons|gifts?|names) (to|for|that|you|i|we)\b",  # brainstorming
    r"\b(top \d+|top (three|five|ten))\b",
]
_DOLLY_POS_PATTERNS = [
    r"^(who|what|when|where|which|whose|whom|why|how (many|much|long|old|far|big|tall|does|do|did|is|are|was|were))\b",
    r"^(is|are|was|were|does|do|did|has|have|can)\b.+\?\s*$",
    (r"^(tell me (about|what|who|when|where|how|why|which)|explain|describe|define|summari[sz]e|name|list|identify|"
    r"classify|extract|give me (a|the) (list|summary|definition|history))\b"),
    r"^(from|based on|given|using) (the|this) (passage|paragraph|text|reference)",
]


def dolly_label(instruction: str, context: str = "") -> int | None:
    """POS / NEG by the written rule, or None when the row is left out (docs/sentinel.md, Dolly)."""
    text = re.sub(r"\s+", " ", instruction).strip().lower()
    text = re.sub(r"^(can|could|would|will) you (please )?|^please ", "", text)  # "Can you write ...?" = "Write ..."
    if not text:
        return None
    if any(re.search(p, text) for p in _DOLLY_NEG_PATTERNS):
        return NEG
    if any(re.search(p, text) for p in _DOLLY_DROP_PATTERNS):
        return None
    if any(re.search(p, text) for p in _DOLLY_POS_PATTERNS):
        return POS
    return None


_DOLLY_FILES = ["output1to1000.csv", "output1001to2000.csv", "output2001to3000.csv", "output3001to5000.csv",
                "output5001to10000.csv", "output10001to15000.csv"]


def _dolly_local(d: Path, label: int):
    for f in _DOLLY_FILES:
        for r in read_csv(d / "dolly15k_instructions_restyled" / f):
            instr, ctx = (r.get("instruction") or "").strip(), (r.get("context") or "").strip()
            if dolly_label(instr, ctx) == label:  # `output` is a restyled rewrite: never read
                yield _rec(f"{instr}\n\n{ctx}" if ctx else instr, label, has_context=bool(ctx))


_prompt_adapter(
    "dolly_factual", POS, [f"dolly15k_instructions_restyled/{f}" for f in _DOLLY_FILES],
    lambda d: _dolly_local(d, POS),
    description="Dolly-15k human instructions (+ pasted context) labelled fact-seeking by dolly_label",
)
_prompt_adapter(
    "dolly_nonfactual", NEG, [f"dolly15k_instructions_restyled/{f}" for f in _DOLLY_FILES],
    lambda d: _dolly_local(d, NEG),
    description="Dolly-15k human instructions labelled non-factual (creative, hypothetical, opinion) by dolly_label",
)


# MT-Bench and Vicuna-Bench (lm-sys/FastChat): categorised chat prompts. shared/data/chat_eval_prompts keeps them
# back as a held-out test set, so these adapters read them only where the files exist; never trained on.
# Categories map to labels by the rule; the rest (MT-Bench extraction, Vicuna generic / common-sense / fermi) are
# left out as mixed.
MT_BENCH_LABELS = {"stem": POS, "humanities": POS, "writing": NEG, "roleplay": NEG, "reasoning": NEG,
                   "math": NEG, "coding": NEG}
VICUNA_BENCH_LABELS = {"knowledge": POS, "counterfactual": NEG, "roleplay": NEG, "writing": NEG, "coding": NEG,
                       "math": NEG}


def _fastchat(d: Path, file: str, labels: dict[str, int], label: int | None):
    for r in read_jsonl(d / "chat_eval_prompts" / file):
        lab = labels.get(r.get("category", ""))
        if lab is not None and (label is None or lab == label):
            turns = r.get("turns") or [r.get("text", "")]
            yield _rec(turns[0], lab, category=r["category"])


_prompt_adapter(
    "mt_bench", POS, ["chat_eval_prompts/mt_bench_question.jsonl"],
    lambda d: _fastchat(d, "mt_bench_question.jsonl", MT_BENCH_LABELS, None),
    description=f"MT-Bench first turns, labelled by category {MT_BENCH_LABELS} (held-out test; both labels)",
)
_prompt_adapter(
    "vicuna_bench", POS, ["chat_eval_prompts/vicuna_bench_question.jsonl"],
    lambda d: _fastchat(d, "vicuna_bench_question.jsonl", VICUNA_BENCH_LABELS, None),
    description=f"Vicuna-Bench prompts, labelled by category {VICUNA_BENCH_LABELS} (held-out test; both labels)",
)
