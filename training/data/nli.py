"""NLI adapters for the Explainer: `PairRecord`s (premise, hypothesis, label, source; extras in `meta`).

Labels follow inference.labels.EXPLAINER_LABELS: 0 entailment, 1 neutral, 2 contradiction. Two-way datasets
(entailment vs not) mark their negative class with NOT_ENTAILMENT = 3: "the answer is neutral OR
contradiction, the dataset does not say which". The Explainer trains those rows with a two-way loss mask
(-log(p_neutral + p_contradiction), see training.explainer.two_way_masked_loss) instead of forcing them onto
one of the two classes: RTE's "not_entailment", for instance, holds both contradictions and unsupported claims,
and mapping it to "neutral" would teach the model that contradictions are neutral. A two-way label is only
mapped to a three-way class where the source says what it was (SciTail: "not_entailment" was "neutral").

Every label mapping is explicit (a dict per dataset); an unknown label value is an error that names the
dataset and the file, never a silent default. Optional `meta` fields: `pair_id` (upstream id, namespaced such
as "mnli:63735n", used to keep evaluation pairs out of training), `domain`, `item` (the upstream item a record
was derived from) and `train_only` (the record never enters the held-out dev/test split).

The Curriculum NLI tasks live in training/data/curriculum.py (registered on import like these).

Evaluation sets (EVAL_SETS) are registered here as adapters too, so that training can load them to remove
overlapping pairs and eval.explainer can score them; training.explainer refuses them as training sources.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

from training.data.base import Adapter, DataError, hub_rows, read_csv, read_json, read_jsonl, register
from training.data.records import PairRecord

ENTAILMENT, NEUTRAL, CONTRADICTION = 0, 1, 2
NOT_ENTAILMENT = 3  # two-way marker: the gold answer is in {neutral, contradiction}
TRAIN_LABEL_NAMES = ["entailment", "neutral", "contradiction", "not_entailment(2-way)"]

# String labels used across the sources (lower-cased before lookup).
THREE_WAY = {"entailment": ENTAILMENT, "neutral": NEUTRAL, "contradiction": CONTRADICTION,
             "e": ENTAILMENT, "n": NEUTRAL, "c": CONTRADICTION}
TWO_WAY = {"entailment": ENTAILMENT, "not_entailment": NOT_ENTAILMENT}

NLI_DIR = "nli"
FELIPE = "nli/felipessalvatore_nli_datasets"
MNLI_DEV = {
    "matched": "nli/multinli_snli_devtest_csv/Multi-genre-nli/multinli_1.0_dev_matched.csv",
    "mismatched": "nli/multinli_snli_devtest_csv/Multi-genre-nli/multinli_1.0_dev_mismatched.csv",
}
SNLI_CSV = {
    "dev": "nli/multinli_snli_devtest_csv/Stanford-nli/snli_1.0_dev.csv",
    "test": "nli/multinli_snli_devtest_csv/Stanford-nli/snli_1.0_test.csv",
}
ANLI_DEV = {r: f"nli/anli_dev_annotated/ANLI_analysis_r{r}_dev.csv" for r in (1, 2, 3)}


def map_label(value, mapping: dict, dataset: str, where: str) -> int:
    """Look a raw label up in the dataset's explicit mapping; unknown values are errors naming the source."""
    key = value.strip().lower() if isinstance(value, str) else value
    if key not in mapping:
        allowed = ", ".join(repr(k) for k in mapping)
        raise DataError(f"{dataset}: {where}: unknown label {value!r} (expected one of {allowed})")
    return mapping[key]


def _rec(premise: str, hypothesis: str, label: int, **meta) -> PairRecord:
    return PairRecord(str(premise).strip(), str(hypothesis).strip(), label, meta=meta)


def _nli_adapter(name, local_files, local, hub_id=None, hub=None, description="", **extra) -> Adapter:
    return register(Adapter(name=name, kind="nli", local_files=local_files, load_local=local, hub_id=hub_id,
                            load_hub=hub, description=description, extra=extra))


# ---- evaluation sets (never trained on) ----------------------------------------------------------------------

def _pair_csv(path: Path, dataset: str, id_prefix: str) -> Iterator[dict]:
    """The Tikquuss MNLI/SNLI CSVs: pairID, sentence1, sentence2, label ('-' = no gold consensus: dropped)."""
    for i, r in enumerate(read_csv(path), 2):
        if r["label"].strip() == "-":
            continue
        yield _rec(r["sentence1"], r["sentence2"], map_label(r["label"], THREE_WAY, dataset, f"{path}:{i}"),
                   pair_id=f"{id_prefix}:{r['pairID']}")


def _hub_three_way(hub_id: str, config: str | None, split: str, id_prefix: str | None = None) -> Iterator[dict]:
    """Hub NLI sets with ClassLabel 0 entailment / 1 neutral / 2 contradiction (-1 = no gold: dropped)."""
    for r in hub_rows(hub_id, config, split):
        if r["label"] not in (0, 1, 2):
            continue
        id_key = next((k for k in ("pairID", "uid") if r.get(k)), None)
        extra = {"pair_id": f"{id_prefix}:{r[id_key]}"} if id_prefix and id_key else {}
        yield _rec(r["premise"], r["hypothesis"], int(r["label"]), **extra)


for _m in ("matched", "mismatched"):
    _nli_adapter(
        f"mnli_dev_{_m}", [MNLI_DEV[_m]],
        lambda d, m=_m: _pair_csv(d / MNLI_DEV[m], f"mnli_dev_{m}", "mnli"),
        "nyu-mll/multi_nli", lambda m=_m: _hub_three_way("nyu-mll/multi_nli", None, f"validation_{m}", "mnli"),
        f"MultiNLI dev {_m} (gold labels; '-' pairs dropped)",
    )

_nli_adapter(
    "snli_test", [SNLI_CSV["test"]], lambda d: _pair_csv(d / SNLI_CSV["test"], "snli_test", "snli"),
    "stanfordnlp/snli", lambda: _hub_three_way("stanfordnlp/snli", None, "test"),
    "SNLI test (gold labels; '-' pairs dropped)",
)


def _anli_local(d: Path, rnd: int) -> Iterator[dict]:
    path = d / ANLI_DEV[rnd]
    for i, r in enumerate(read_csv(path), 2):
        yield _rec(r["context"], r["statement"], map_label(r["gold_label"], THREE_WAY, f"anli_r{rnd}_dev",
                                                           f"{path}:{i}"), pair_id=f"anli:{r['uid']}")


for _r in (1, 2, 3):
    _nli_adapter(
        f"anli_r{_r}_dev", [ANLI_DEV[_r]], lambda d, r=_r: _anli_local(d, r),
        "facebook/anli", lambda r=_r: _hub_three_way("facebook/anli", None, f"dev_r{r}", "anli"),
        f"ANLI round {_r} dev (local copy: 'ANLIzing ANLI' annotated dev; R3 has 1,198 of 1,200 pairs)",
    )


# ---- SICK (three-way; SemEval-2014 TRAIN+TRIAL for training, TEST held out) ------------------------------------

SICK_FILE = "nli/sick/SICK.txt"
SICK_LABELS = {"entailment": ENTAILMENT, "neutral": NEUTRAL, "contradiction": CONTRADICTION}


def _sick_local(d: Path, parts: set[str]) -> Iterator[dict]:
    path = d / SICK_FILE
    for i, r in enumerate(read_csv(path, delimiter="\t"), 2):
        if r["SemEval_set"].strip() in parts:
            yield _rec(r["sentence_A"], r["sentence_B"], map_label(r["entailment_label"], SICK_LABELS, "sick",
                                                                   f"{path}:{i}"),
                       pair_id=f"sick:{r['pair_ID']}")


def _sick_hub(splits: tuple[str, ...]) -> Iterator[dict]:
    for split in splits:  # RobZamp/sick: ClassLabel 0 entailment, 1 neutral, 2 contradiction
        for r in hub_rows("RobZamp/sick", None, split):
            yield _rec(r["sentence_A"], r["sentence_B"], int(r["label"]), pair_id=f"sick:{r['id']}")


_nli_adapter("sick", [SICK_FILE], lambda d: _sick_local(d, {"TRAIN", "TRIAL"}),
             "RobZamp/sick", lambda: _sick_hub(("train", "validation")),
             "SICK SemEval-2014 train + trial (label: entailment_label)")
_nli_adapter("sick_test", [SICK_FILE], lambda d: _sick_local(d, {"TEST"}),
             "RobZamp/sick", lambda: _sick_hub(("test",)), "SICK SemEval-2014 test (held out)")


# ---- MNLI-train part of TaxiNLI, SNLI dev -----------------------------------------------------------------------

TAXINLI_FILE = "nli/taxinli/taxinli10k.tsv"


def _taxinli(d: Path) -> Iterator[dict]:
    """All 10,071 TaxiNLI pairs with their MNLI pairIDs. 7,874 of them are MNLI dev pairs: the Explainer's
    evaluation-set filter removes them (by text and by pairID), leaving the 2,197 MNLI-train pairs."""
    path = d / TAXINLI_FILE
    for i, r in enumerate(read_csv(path, delimiter="\t"), 2):
        yield _rec(r["prem"], r["hyp"], map_label(r["label"], THREE_WAY, "taxinli", f"{path}:{i}"),
                   pair_id=f"mnli:{r['pairID']}", domain=r.get("genre", ""))


_nli_adapter("taxinli", [TAXINLI_FILE], _taxinli,
             description="TaxiNLI: MNLI pairs with MNLI gold labels (column `label`, not `annotated_label`); "
                         "only the MNLI-train part survives the evaluation-set filter")

_nli_adapter("snli_dev", [SNLI_CSV["dev"]], lambda d: _pair_csv(d / SNLI_CSV["dev"], "snli_dev", "snli"),
             "stanfordnlp/snli", lambda: _hub_three_way("stanfordnlp/snli", None, "validation"),
             "SNLI dev (not an evaluation set here: SNLI test is)")


# ---- felipessalvatore/NLI_datasets (premise,hypothesis,label CSVs) ----------------------------------------------

_MPE_IMAGE_ID = re.compile(r"\s*\d+jpg\d")  # MPE premises glue four Flickr captions behind "<id>jpg<k>"
_HTML_TAG = re.compile(r"</?[a-z]+>")       # add-one RTE marks the adjective-noun span with <b><u>


def _strip_tags(text: str) -> str:
    return re.sub(r"\s+", " ", _HTML_TAG.sub("", text)).strip()


def _clean_mpe(premise: str) -> str:
    parts = [p.strip() for p in _MPE_IMAGE_ID.split(premise) if p.strip()]
    return ". ".join(p.rstrip(".") for p in parts) + "."


def _same(text: str) -> str:
    return text


def _felipe(name: str, dirname: str, files: tuple[str, ...], mapping: dict, clean_premise=_same,
            clean_hypothesis=_same) -> Callable[[Path], Iterator[dict]]:
    def load(d: Path) -> Iterator[dict]:
        for f in files:
            path = d / FELIPE / dirname / f
            for i, r in enumerate(read_csv(path), 2):
                yield _rec(clean_premise(r["premise"]), clean_hypothesis(r["hypothesis"]),
                           map_label(r["label"], mapping, name, f"{path}:{i}"))
    return load


def _felipe_adapter(name, dirname, files, mapping, description, clean_premise=_same, clean_hypothesis=_same,
                    hub_id=None, hub=None):
    _nli_adapter(name, [f"{FELIPE}/{dirname}/{f}" for f in files],
                 _felipe(name, dirname, files, mapping, clean_premise, clean_hypothesis), hub_id, hub, description)


# Three-way sets (labels already entailment/neutral/contradiction).
_felipe_adapter("mpe", "mpe", ("train.csv", "dev.csv"), THREE_WAY,
                "MPE multi-premise NLI (four Flickr captions as premise; image ids stripped)",
                clean_premise=_clean_mpe)
_felipe_adapter("joci", "joci", ("train.csv", "dev.csv"), THREE_WAY,
                "JOCI ordinal common-sense inference recast by the collection's author: 5 -> entailment, "
                "2-4 -> neutral, 0-1 -> contradiction (mapping inherited, see the collection README)")
_felipe_adapter("fracas", "fracas", ("train.csv", "dev.csv"), THREE_WAY,
                "FraCaS (yes -> entailment, no -> contradiction, unknown/undef -> neutral, by the collection)")


def _cb_hub() -> Iterator[dict]:
    # super_glue cb ClassLabel order is entailment, contradiction, neutral: remapped explicitly.
    cb = {0: ENTAILMENT, 1: CONTRADICTION, 2: NEUTRAL}
    for split in ("train", "validation"):
        for r in hub_rows("aps/super_glue", "cb", split):
            yield _rec(r["premise"], r["hypothesis"], map_label(r["label"], cb, "cb", f"aps/super_glue cb {split}"))


_felipe_adapter("cb", "commitment_bank", ("train.csv", "dev.csv"), THREE_WAY,
                "CommitmentBank (SuperGLUE CB train + validation)", hub_id="aps/super_glue", hub=_cb_hub)

# SciTail: the collection renamed SciTail's "neutral" to "not_entailment"; the original label is restored.
SCITAIL_LABELS = {"entailment": ENTAILMENT, "not_entailment": NEUTRAL}


def _scitail_hub() -> Iterator[dict]:
    labels = {"entailment": ENTAILMENT, "entails": ENTAILMENT, "neutral": NEUTRAL}
    for r in hub_rows("allenai/scitail", "snli_format", "train"):
        yield _rec(r["sentence1"], r["sentence2"], map_label(r["gold_label"], labels, "scitail", "allenai/scitail"))


_felipe_adapter("scitail", "scitail", ("dev.csv",), SCITAIL_LABELS,
                "SciTail (local file = the official SciTail test split; not_entailment -> neutral, its original "
                "label)", hub_id="allenai/scitail", hub=_scitail_hub)


# Two-way sets: "not_entailment" -> NOT_ENTAILMENT (two-way loss mask).
def _rte_hub() -> Iterator[dict]:
    rte = {0: ENTAILMENT, 1: NOT_ENTAILMENT}  # GLUE RTE: 0 entailment, 1 not_entailment
    for r in hub_rows("nyu-mll/glue", "rte", "train"):
        yield _rec(r["sentence1"], r["sentence2"], map_label(r["label"], rte, "rte", "nyu-mll/glue rte"))


_felipe_adapter("rte", "rte", ("train.csv",), TWO_WAY, "GLUE RTE train (two-way)", hub_id="nyu-mll/glue",
                hub=_rte_hub)
_felipe_adapter("rte_dev", "rte", ("dev.csv",), TWO_WAY, "GLUE RTE dev (two-way; held out for evaluation)")
_felipe_adapter("add_one_rte", "add_one_rte", ("train.csv", "dev.csv"), TWO_WAY,
                "Add-one RTE (adjective-noun composition; <b><u> markup stripped; two-way)",
                clean_premise=_strip_tags, clean_hypothesis=_strip_tags)
# Registered for completeness, left out of the recipes: QNLI asks whether a sentence answers a question (the
# collection puts the question in `premise`), COPA is a recast cause/effect choice and WNLI's train/dev pairs are
# adversarially flipped; none of them is textual entailment in the MNLI sense.
_felipe_adapter("qnli", "qnli", ("dev.csv",), TWO_WAY,
                "QNLI dev (answer containment, not entailment: not used by the recipes)")
_felipe_adapter("copa", "copa", ("train.csv", "dev.csv"), TWO_WAY,
                "COPA recast as NLI by the collection's author (not used by the recipes)")
_felipe_adapter("wnli", "wnli", ("train.csv", "dev.csv"), TWO_WAY, "WNLI (not used by the recipes)")


# ---- MED (monotonicity; two-way: its "neutral" means neutral OR contradiction) ----------------------------------

MED_FILE = "nli/med_monotonicity/MED.tsv"
MED_LABELS = {"entailment": ENTAILMENT, "neutral": NOT_ENTAILMENT}  # MED README: neutral = neutral + contradiction


def _med(d: Path) -> Iterator[dict]:
    path = d / MED_FILE
    for i, r in enumerate(read_csv(path, delimiter="\t"), 2):
        yield _rec(r["sentence1"], r["sentence2"], map_label(r["gold_label"], MED_LABELS, "med", f"{path}:{i}"),
                   pair_id=f"med:{r['pairID']}", domain=r["genre"])


_nli_adapter("med", [MED_FILE], _med,
             description="MED monotonicity entailment (two-way; an evaluation set, never trained on)")


# ---- Hub-only training sets of the published recipe --------------------------------------------------------------

_nli_adapter("mnli", [], None, "nyu-mll/multi_nli", lambda: _hub_three_way("nyu-mll/multi_nli", None, "train", "mnli"),
             "MultiNLI train")
_nli_adapter("snli", [], None, "stanfordnlp/snli", lambda: _hub_three_way("stanfordnlp/snli", None, "train"),
             "SNLI train")
_nli_adapter("anli", [], None, "facebook/anli",
             lambda: (r for n in (1, 2, 3) for r in _hub_three_way("facebook/anli", None, f"train_r{n}", "anli")),
             "ANLI train rounds 1-3")


def _wanli_hub() -> Iterator[dict]:
    for r in hub_rows("alisawuffles/WANLI", None, "train"):
        gold = r.get("gold", r.get("label"))
        yield _rec(r["premise"], r["hypothesis"], map_label(gold, THREE_WAY, "wanli", "alisawuffles/WANLI train"))


_nli_adapter("wanli", [], None, "alisawuffles/WANLI", _wanli_hub, "WANLI train (string gold labels)")


# ---- grounding sets: source document / knowledge as premise, summary / response as hypothesis -------------------

SUMMEDITS_DOMAINS = ["ectsum", "news", "podcast", "qmsumm", "sales_call", "sales_email", "samsum", "scitldr"]
SUMMEDITS_LABELS = {1: ENTAILMENT, 0: NOT_ENTAILMENT}  # 1 = consistent with the document, 0 = inconsistent


def _summedits(d: Path, split: str) -> Iterator[dict]:
    """SummEdits ships a 'test' and an 'evaluation' split whose documents are disjoint: 'evaluation' is used for
    training, 'test' for the grounding evaluation."""
    for dom in SUMMEDITS_DOMAINS:
        path = d / "summedits" / f"summedits_{dom}.json"
        for r in read_json(path):
            if r["split"] == split:
                yield _rec(r["doc"], r["summary"], map_label(r["label"], SUMMEDITS_LABELS, "summedits",
                                                             f"{path} id={r['id']}"),
                           pair_id=f"summedits:{r['id']}", domain=dom)


_nli_adapter("summedits", [f"summedits/summedits_{d}.json" for d in SUMMEDITS_DOMAINS],
             lambda d: _summedits(d, "evaluation"),
             description="SummEdits 'evaluation' split (32 documents): consistent -> entailment, "
                         "inconsistent -> not_entailment (two-way)")
_nli_adapter("summedits_test", [f"summedits/summedits_{d}.json" for d in SUMMEDITS_DOMAINS],
             lambda d: _summedits(d, "test"), description="SummEdits 'test' split (grounding evaluation)")

BEGIN_DEV = ["begin_dialogue_attribution/cmu-dog/begin_dev_cmu.tsv",
             "begin_dialogue_attribution/topicalchat/begin_dev_tc.tsv",
             "begin_dialogue_attribution/wow/begin_dev_wow.tsv"]
BEGIN_TEST = ["begin_dialogue_attribution/wow/begin_test_wow.tsv"]
# A generic response ("that sounds fun!") makes no claim the knowledge could support or contradict: neutral.
BEGIN_LABELS = {"fully attributable": ENTAILMENT, "not fully attributable": NOT_ENTAILMENT, "generic": NEUTRAL}


def _begin(d: Path, files: list[str]) -> Iterator[dict]:
    for f in files:
        path = d / f
        for i, r in enumerate(read_csv(path, delimiter="\t"), 2):
            yield _rec(r["knowledge"], r["response"], map_label(r["begin_label"], BEGIN_LABELS, "begin",
                                                                 f"{path}:{i}"),
                       domain=f"{r['data_source']}/{r['model_name']}")


_nli_adapter("begin", BEGIN_DEV, lambda d: _begin(d, BEGIN_DEV),
             description="BEGIN dev (CMU-DoG, TopicalChat, WoW): knowledge -> response attribution")
_nli_adapter("begin_test", BEGIN_TEST, lambda d: _begin(d, BEGIN_TEST),
             description="BEGIN WoW test (grounding evaluation)")

FAITHDIAL_FILES = [
    "faithdial_hallucination_audit/gold/cmu.csv", "faithdial_hallucination_audit/gold/topical.csv",
    "faithdial_hallucination_audit/gold/wow.csv",
    *(f"faithdial_hallucination_audit/{m}/{m.lower()}_processed_{s}.csv"
      for m, subsets in (("CTRL", ("cmu", "topicalchat", "wow")), ("DoHA", ("cmu", "topical", "wow")),
                         ("GPT2", ("cmu", "topical", "wow"))) for s in subsets),
]
_FAITHDIAL_TYPOS = {"entailmentt": "entailment", "hallucinated": "hallucination"}


def faithdial_label(raw: str, where: str) -> int | None:
    """FaithDial audit BEGIN labels -> NLI label; None = row dropped.

    entailment, entailment+uncooperative -> entailment (uncooperative is about the dialogue, not the knowledge);
    any (partial) hallucination -> not_entailment (two-way: unsupported or contradicting); generic -> neutral;
    uncooperative alone and empty labels -> dropped (they say nothing about attribution).
    """
    parts = {_FAITHDIAL_TYPOS.get(p.strip(), p.strip())
             for p in re.split(r"[,.]", (raw or "").lower()) if p.strip()}
    if not parts or parts == {"uncooperative"}:
        return None
    if parts & {"hallucination", "partial hallucination"}:
        return NOT_ENTAILMENT
    if parts <= {"entailment", "uncooperative"}:
        return ENTAILMENT
    if parts == {"generic"}:
        return NEUTRAL
    raise DataError(f"faithdial_audit: {where}: unknown BEGIN label {raw!r}")


def _faithdial(d: Path) -> Iterator[dict]:
    for f in FAITHDIAL_FILES:
        path = d / f
        model = f.split("/")[1].lower()
        for i, r in enumerate(read_csv(path), 2):
            raw = r.get("BEGIN", r.get("begin_label"))
            premise = r.get("evidence", r.get("knowledge"))
            response = r.get("response", r.get(model))
            if raw is None or premise is None or response is None:
                raise DataError(f"faithdial_audit: {path}: expected columns evidence/knowledge, response/{model} "
                                f"and BEGIN/begin_label, found {sorted(r)}")
            label = faithdial_label(raw, f"{path}:{i}")
            if label is not None and premise.strip() and response.strip():
                yield _rec(premise, response, label, domain=f"{model}/{Path(f).stem}")


_nli_adapter("faithdial_audit", FAITHDIAL_FILES, _faithdial,
             description="FaithDial data audit (gold + CTRL/DoHA/GPT2 responses with BEGIN labels)")


# ---- CAD: counterfactually-augmented SNLI (three-way minimal pairs) ------------------------------------------------

CAD_DIR = "cad_snli_counterfactual"
CAD_FILES = {"original": f"{CAD_DIR}/original/train.tsv", "revised_premise": f"{CAD_DIR}/revised_premise/train.tsv",
             "revised_hypothesis": f"{CAD_DIR}/revised_hypothesis/train.tsv"}
CAD_LABELS = {"entailment": ENTAILMENT, "neutral": NEUTRAL, "contradiction": CONTRADICTION}


def _cad(d: Path) -> Iterator[dict]:
    """Rows 2i and 2i+1 of each revised file are the two edits of original row i (PROVENANCE.md): every record
    carries `item` = its original item. The revisions are near-duplicates of each other, so CAD is
    `train_only` (kept out of the held-out dev/test split, which a row-level split would leak into)."""
    for variant, rel in CAD_FILES.items():
        path = d / rel
        for i, r in enumerate(read_csv(path, delimiter="\t"), 2):
            item = i - 2 if variant == "original" else (i - 2) // 2
            yield _rec(r["sentence1"], r["sentence2"], map_label(r["gold_label"], CAD_LABELS, "cad_snli",
                                                                 f"{path}:{i}"),
                       pair_id=f"cad:{variant}:{i - 2}", item=f"cad:{item}", domain=variant, train_only=True)


_nli_adapter("cad_snli", list(CAD_FILES.values()), _cad,
             description="Counterfactually-augmented SNLI (Kaushik et al. 2020): 1,666 SNLI-train pairs + 2 premise "
                         "and 2 hypothesis edits each that flip the label (three-way; train-only)")


# ---- WiCE: Wikipedia claims against the cited web page (grounding evaluation) -------------------------------------

WICE_FILES = {s: f"wice/entailment_retrieval_claim/{s}.jsonl" for s in ("dev", "test")}
# Claim-level labels: a claim is supported only when the cited page supports all of it; "partially_supported"
# and "not_supported" are both "not supported" for grounding (two-way: the page rarely contradicts a claim, it
# just does not say it).
WICE_LABELS = {"supported": ENTAILMENT, "partially_supported": NOT_ENTAILMENT, "not_supported": NOT_ENTAILMENT}


def _wice(d: Path, split: str) -> Iterator[dict]:
    """Premise = the whole cited page (evidence sentences, the `(meta data)` title/date lines dropped), so the
    score includes finding the evidence (premise windows ranked by overlap, as in inference), not the oracle
    `supporting_sentences`."""
    path = d / WICE_FILES[split]
    for i, r in enumerate(read_jsonl(path), 1):
        evidence = [e for e in r.get("evidence", []) if not str(e).startswith("(meta data)")]
        if not evidence or not str(r.get("claim", "")).strip():
            raise DataError(f"wice_{split}: {path}:{i}: record without claim or evidence")
        yield _rec("\n".join(str(e) for e in evidence), r["claim"],
                   map_label(r["label"], WICE_LABELS, f"wice_{split}", f"{path}:{i}"),
                   pair_id=f"wice:{r.get('meta', {}).get('id', f'{split}{i}')}", domain=f"wice_{r['label']}")


_nli_adapter("wice_test", [WICE_FILES["test"]], lambda d: _wice(d, "test"),
             description="WiCE claim-level test (358 Wikipedia claims vs the cited page; supported vs not: grounding "
                         "evaluation)")
_nli_adapter("wice_dev", [WICE_FILES["dev"]], lambda d: _wice(d, "dev"),
             description="WiCE claim-level dev (349 claims; registered for threshold tuning, not used by the recipes)")


# ---- evaluation sets ---------------------------------------------------------------------------------------------

# name -> kind: "three_way" sets report 3-class accuracy / macro-F1; "binary" sets report supported vs not.
EVAL_SETS = {
    "mnli_dev_matched": "three_way",
    "mnli_dev_mismatched": "three_way",
    "snli_test": "three_way",
    "anli_r1_dev": "three_way",
    "anli_r2_dev": "three_way",
    "anli_r3_dev": "three_way",
    "sick_test": "three_way",
    "rte_dev": "binary",
    "summedits_test": "binary",
    "begin_test": "binary",
    "wice_test": "binary",
    "med": "binary",  # monotonicity (two-way); Curriculum's monotonicity_infer val copies it, so it is never trained on
}
# The sets of the evaluation protocol: failing to load one of them stops training (no silent leak).
CORE_EVAL_SETS = ["mnli_dev_matched", "mnli_dev_mismatched", "snli_test", "anli_r1_dev", "anli_r2_dev",
                  "anli_r3_dev"]
# Evaluation sets a recipe may train on instead (no MNLI train split exists locally). Such a set leaves
# the evaluation index only while it is an active training source, and eval.explainer then skips it for that
# run (the README reports MNLI dev-matched only).
TRAINABLE_EVAL_SETS = ["mnli_dev_mismatched"]
