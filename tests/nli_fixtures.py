"""A miniature copy of the local NLI data layout (a few rows per file) for the Explainer tests.

Rows are written in each source's own format and label vocabulary, so the adapters' label mappings are tested
on what the real files contain. `write_nli_data(root)` returns root.
"""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

PAIRS3 = [  # (premise, hypothesis, label) in the three-way vocabulary
    ("A man is playing a guitar on stage.", "A man is performing music.", "entailment"),
    ("A man is playing a guitar on stage.", "The man is a famous rock star.", "neutral"),
    ("A man is playing a guitar on stage.", "The man is sleeping at home.", "contradiction"),
    ("Two dogs run across a snowy field.", "Animals are outside.", "entailment"),
    ("Two dogs run across a snowy field.", "The dogs are chasing a ball.", "neutral"),
    ("Two dogs run across a snowy field.", "The cats sit indoors.", "contradiction"),
    ("A woman slices tomatoes in a kitchen.", "Someone is preparing food.", "entailment"),
    ("A woman slices tomatoes in a kitchen.", "She is making a salad for her family.", "neutral"),
    ("A woman slices tomatoes in a kitchen.", "The woman is swimming.", "contradiction"),
]

# The MNLI dev pair that TaxiNLI also contains (by text and by pairID), and one that only matches by pairID
# because TaxiNLI's copy has mojibake.
MNLI_DEV_OVERLAP = ("The new rights are nice enough", "Everyone really likes the newest benefits ", "neutral",
                    "63735n")
MNLI_DEV_ID_ONLY = ("The route passes in sight of Es Vedrà.", "The beach is dirty sand.", "contradiction",
                    "77777c")


def _write_csv(path: Path, header: list[str], rows: list[list], delimiter: str = ",") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, delimiter=delimiter)
        w.writerow(header)
        w.writerows(rows)


def write_nli_data(root: Path) -> Path:
    root = Path(root)
    nli = root / "nli"
    mnli = nli / "multinli_snli_devtest_csv"
    m_rows = [[f"{i}e", p, h, lab] for i, (p, h, lab) in enumerate(PAIRS3[:3])]
    m_rows.append([MNLI_DEV_OVERLAP[3], *MNLI_DEV_OVERLAP[:3]])
    m_rows.append([MNLI_DEV_ID_ONLY[3], *MNLI_DEV_ID_ONLY[:3]])
    m_rows.append(["9999x", "No consensus premise.", "No consensus hypothesis.", "-"])
    _write_csv(mnli / "Multi-genre-nli/multinli_1.0_dev_matched.csv", ["pairID", "sentence1", "sentence2", "label"],
               m_rows)
    _write_csv(mnli / "Multi-genre-nli/multinli_1.0_dev_mismatched.csv",
               ["pairID", "sentence1", "sentence2", "label"],
               [[f"{i}m", p, h, lab] for i, (p, h, lab) in enumerate(PAIRS3[3:6])])
    _write_csv(mnli / "Stanford-nli/snli_1.0_test.csv", ["pairID", "sentence1", "sentence2", "label"],
               [[f"t{i}", p, h, lab] for i, (p, h, lab) in enumerate(PAIRS3[6:])] + [["t9", "x y", "z", "-"]])
    # SNLI dev: nine pairs, different from the test pairs.
    _write_csv(mnli / "Stanford-nli/snli_1.0_dev.csv", ["pairID", "sentence1", "sentence2", "label"],
               [[f"d{i}", "Dev " + p, h, lab] for i, (p, h, lab) in enumerate(PAIRS3)])
    anli_header = ["context", "statement", "reason", "gold_label", "uid"]
    for r in (1, 2, 3):
        _write_csv(nli / f"anli_dev_annotated/ANLI_analysis_r{r}_dev.csv", anli_header,
                   [[f"ANLI{r} " + p, h, "why", lab[0], f"u{r}{i}"] for i, (p, h, lab) in enumerate(PAIRS3[:3])])
    # TaxiNLI: the MNLI dev pair (exact text), the mojibake copy of the id-only pair, and two MNLI-train pairs.
    tax_header = ["prem", "hyp", "label", "annotated_label", "pairID", "genre"]
    _write_csv(nli / "taxinli/taxinli10k.tsv", tax_header, [
        [MNLI_DEV_OVERLAP[0], MNLI_DEV_OVERLAP[1], "neutral", "neutral", MNLI_DEV_OVERLAP[3], "slate"],
        ["The route passes in sight of Es Vedr?\u252c\u00e1.", MNLI_DEV_ID_ONLY[1], "contradiction", "neutral",
         MNLI_DEV_ID_ONLY[3], "travel"],
        ["Train premise one.", "Train hypothesis one.", "entailment", "contradiction", "1111e", "fiction"],
        ["Train premise two.", "Train hypothesis two.", "contradiction", "neutral", "2222c", "fiction"],
    ], delimiter="\t")
    sick_header = ["pair_ID", "sentence_A", "sentence_B", "entailment_label", "relatedness_score", "SemEval_set"]
    sick_rows = [[str(i), "Sick " + p, h, lab.upper(), "3.0", ("TRAIN", "TRIAL", "TEST")[i % 3]]
                 for i, (p, h, lab) in enumerate(PAIRS3)]
    _write_csv(nli / "sick/SICK.txt", sick_header, sick_rows, delimiter="\t")
    felipe = nli / "felipessalvatore_nli_datasets"
    three = [[p, h, lab] for p, h, lab in PAIRS3]
    for name in ("joci", "fracas", "commitment_bank"):
        _write_csv(felipe / name / "train.csv", ["premise", "hypothesis", "label"], three[:6])
        _write_csv(felipe / name / "dev.csv", ["premise", "hypothesis", "label"], three[6:])
    _write_csv(felipe / "mpe/train.csv", ["premise", "hypothesis", "label"],
               [["4615316828jpg1Very young girl holding a spoon 4615316828jpg2A child holding a white spoon",
                 "Toddler sitting", "entailment"]])
    _write_csv(felipe / "mpe/dev.csv", ["premise", "hypothesis", "label"],
               [["1jpg0A man on a bike 1jpg3A road scene", "A man walks", "contradiction"]])
    two = [["The cat sat on the mat.", "A cat is on a mat.", "entailment"],
           ["The cat sat on the mat.", "The dog sat on the mat.", "not_entailment"]]
    _write_csv(felipe / "rte/train.csv", ["premise", "hypothesis", "label"], two)
    _write_csv(felipe / "rte/dev.csv", ["premise", "hypothesis", "label"],
               [["Paris is the capital of France.", "France's capital is Paris.", "entailment"],
                ["Paris is the capital of France.", "Paris is in Spain.", "not_entailment"]])
    _write_csv(felipe / "scitail/dev.csv", ["premise", "hypothesis", "label"],
               [["Plants make food by photosynthesis.", "Plants use photosynthesis.", "entailment"],
                ["Plants make food by photosynthesis.", "Plants need soil.", "not_entailment"]])
    _write_csv(felipe / "add_one_rte/train.csv", ["premise", "hypothesis", "label"],
               [["It was <b><u>the  creature</u></b>.", "It was <b><u>the wild creature</u></b>.\n", "not_entailment"]])
    _write_csv(felipe / "add_one_rte/dev.csv", ["premise", "hypothesis", "label"],
               [["A <b><u>red car</u></b> left.", "A <b><u>car</u></b> left.", "entailment"]])
    for name, files in (("qnli", ("dev.csv",)), ("copa", ("train.csv", "dev.csv")),
                        ("wnli", ("train.csv", "dev.csv"))):
        for f in files:
            _write_csv(felipe / name / f, ["premise", "hypothesis", "label"], two)
    med_header = ["index", "promptID", "pairID", "genre", "sentence1", "sentence2", "gold_label"]
    _write_csv(nli / "med_monotonicity/MED.tsv", med_header, [
        ["1", "1", "1", "paper:upward_monotone", "An Irishman won the prize.", "An Irishman won a prize.",
         "entailment"],
        ["2", "2", "2", "crowd:downward_monotone", "No delegate finished the report on time.",
         "No delegate finished the report.", "neutral"],
    ], delimiter="\t")
    # Grounding sets.
    se = root / "summedits"
    se.mkdir(parents=True, exist_ok=True)
    for dom in ("ectsum", "news", "podcast", "qmsumm", "sales_call", "sales_email", "samsum", "scitldr"):
        rows = [{"id": f"{dom}1", "doc": f"The {dom} meeting ended at noon. Revenue grew by five percent.",
                 "summary": "Revenue grew by five percent.", "label": 1, "split": "evaluation"},
                {"id": f"{dom}2", "doc": f"The {dom} meeting ended at noon. Revenue grew by five percent.",
                 "summary": "Revenue fell by five percent.", "label": 0, "split": "evaluation"},
                {"id": f"{dom}3", "doc": f"The {dom} call was long. " * 40 + "Costs were flat.",
                 "summary": "Costs were flat.", "label": 1, "split": "test"},
                {"id": f"{dom}4", "doc": f"The {dom} call was long. Costs were flat.",
                 "summary": "Costs doubled.", "label": 0, "split": "test"}]
        (se / f"summedits_{dom}.json").write_text(json.dumps(rows), encoding="utf-8")
    begin_header = ["model_name", "data_source", "knowledge", "message", "response", "begin_label"]
    bd = root / "begin_dialogue_attribution"
    _write_csv(bd / "cmu-dog/begin_dev_cmu.tsv", begin_header,
               [["gpt2", "cmu", "The film stars Tom Hanks.", "Who is in it?", "Tom Hanks stars in it.",
                 "Fully attributable"]], delimiter="\t")
    _write_csv(bd / "topicalchat/begin_dev_tc.tsv", begin_header,
               [["t5", "tc", "The Nile is in Africa.", "Rivers?", "That's cool!", "Generic"]], delimiter="\t")
    _write_csv(bd / "wow/begin_dev_wow.tsv", begin_header,
               [["doha", "wow", "Jazz began in New Orleans.", "Jazz?", "Jazz began in Chicago in 1950.",
                 "Not fully attributable"]], delimiter="\t")
    _write_csv(bd / "wow/begin_test_wow.tsv", begin_header,
               [["ctrl", "wow", "Bees make honey.", "Bees?", "Bees make honey.", "Fully attributable"],
                ["ctrl", "wow", "Bees make honey.", "Bees?", "Bees make cheese.", "Not fully attributable"],
                ["ctrl", "wow", "Bees make honey.", "Bees?", "Nice!", "Generic"]], delimiter="\t")
    fd = root / "faithdial_hallucination_audit"
    _write_csv(fd / "gold/cmu.csv", ["evidence", "history", "response", "BEGIN", "VRM"], [
        ["Law work applies theories.", "tell me", "Law work applies theories.", "Entailment", "Edification"],
        ["Law work applies theories.", "tell me", "Lawyers earn millions.", "Hallucination", "x"],
        ["Law work applies theories.", "tell me", "Some of it.", "Partial Hallucination", "x"],
        ["Law work applies theories.", "tell me", "I like law!", "Generic", "x"],
        ["Law work applies theories.", "tell me", "Whatever.", "Uncooperative", "x"],
        ["Law work applies theories.", "tell me", "No label here.", "", "x"]])
    _write_csv(fd / "gold/topical.csv", ["evidence", "history", "response", "BEGIN", "VRM"], [])
    _write_csv(fd / "gold/wow.csv", ["evidence", "history", "response", "BEGIN", "VRM"], [])
    for model, subsets in (("CTRL", ("cmu", "topicalchat", "wow")), ("DoHA", ("cmu", "topical", "wow")),
                           ("GPT2", ("cmu", "topical", "wow"))):
        for s in subsets:
            col = model.lower()
            _write_csv(fd / model / f"{col}_processed_{s}.csv", ["knowledge", "history", col, "begin_label",
                                                                 "vrm_label"],
                       [["Rome is in Italy.", "where?", "Rome is in Italy.", "entailment,uncooperative", "x"],
                        ["Rome is in Italy.", "where?", "Rome is in Spain.", "entailment,hallucination", "x"],
                        ["Rome is in Italy.", "where?", "Rome is old.", "entailmentt,uncooperative", "x"],
                        ["Rome is in Italy.", "where?", "Rome has 9 hills.", "hallucinated", "x"]]
                       if (model, s) == ("GPT2", "wow") else [])
    write_new_nli_sources(root)
    return root


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def write_task_zip(root: Path, task: str, train: list[tuple], val: list[tuple] | None = None,
                   junk: bool = True) -> Path:
    """<root>/curriculum_nli/<task>.zip laid out as the real zips, macOS debris included."""
    path = root / "curriculum_nli" / f"{task}.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = {split: [{"premise": p, "hypothesis": h, "gold_label": lab, "idx": i} for i, (p, h, lab) in enumerate(r)]
            for split, r in (("train", train), ("val", val or train[:1]))}
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{task}/", "")
        for split, r in rows.items():
            zf.writestr(f"{task}/{split}.jsonl", _jsonl(r))
            if junk:  # AppleDouble copies: binary, and named like the real files
                zf.writestr(f"__MACOSX/{task}/._{split}.jsonl", b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X")
        if junk:
            zf.writestr(f"__MACOSX/._{task}", b"\x00\x05\x16\x07")
            zf.writestr(f"{task}/.DS_Store", b"\x00\x00\x00\x01Bud1")
            zf.writestr(f"{task}/._train.jsonl", b"\x00\x05\x16\x07")
    return path


def write_new_nli_sources(root: Path) -> Path:
    """Curriculum zips (every task: a few rows in its own label vocabulary; boolean, logiqa and
    monotonicity_infer with the rows the tests read), CAD and WiCE files in their real formats."""
    from training.data.curriculum import THREE_WAY_TASKS, TWO_WAY_TASKS

    for task in THREE_WAY_TASKS:
        write_task_zip(root, task, [("Ann sings.", "Ann makes sound.", "entailment"),
                                    ("Ann sings.", "Ann sings well.", "neutral"),
                                    ("Ann sings.", "Ann is silent.", "contradiction")])
    for task in TWO_WAY_TASKS:
        write_task_zip(root, task, [("Bo runs.", "Bo moves.", "entailed"), ("Bo runs.", "Bo sits.", "not-entailed")])
    write_task_zip(root, "boolean", [("Ann and Bo only visited Peru.", "Bo visited Peru.", "entailment"),
                                     ("Ann and Bo only visited Peru.", "Cy visited Peru.", "neutral"),
                                     ("Ann and Bo only visited Peru.", "Bo didn't visit Peru.", "contradiction")])
    write_task_zip(root, "logiqa", [("All cats purr. Tom is a cat.", "Tom purrs.", "entailed"),
                                    ("All cats purr. Tom is a cat.", "Tom barks.", "not-entailed")])
    # monotonicity_infer: three-way names in train, two-way in val (which is mostly MED: never read).
    write_task_zip(root, "monotonicity_infer",
                   [("Some dogs ran fast.", "Some animals ran fast.", "entailment"),
                    ("Some dogs ran fast.", "Some poodles ran fast.", "neutral"),
                    ("No delegate finished the report on time.", "No delegate finished the report.", "neutral")],
                   val=[("An Irishman won the prize.", "An Irishman won a prize.", "entailed")])
    cad = root / "cad_snli_counterfactual"
    orig = ("A boy rides a red bike.", "A child is on a bike.", "entailment")
    for variant, rows in (("original", [orig]),
                          ("revised_premise", [("A boy stands near a red bike.", orig[1], "neutral"),
                                               ("A boy sleeps in his bed.", orig[1], "contradiction")]),
                          ("revised_hypothesis", [(orig[0], "A child is racing.", "neutral"),
                                                  # = an SNLI test pair of the fixture: must be removed
                                                  (PAIRS3[8][0], PAIRS3[8][1], "contradiction")])):
        (cad / variant).mkdir(parents=True, exist_ok=True)
        (cad / variant / "train.tsv").write_text(
            "sentence1\tsentence2\tgold_label\n" + "".join(f"{p}\t{h}\t{lab}\n" for p, h, lab in rows))
    wice = root / "wice/entailment_retrieval_claim"
    wice.mkdir(parents=True, exist_ok=True)
    evidence = ["(meta data) TITLE: The tower", "The tower was built 1887-1889.", "It is 330 meters tall."]
    for split in ("dev", "test"):
        rows = [{"label": "supported", "claim": "The tower is 330 meters tall.", "evidence": evidence,
                 "supporting_sentences": [[2]], "meta": {"id": f"{split}1"}},
                {"label": "partially_supported", "claim": "The tower, built in 1889, is 500 meters tall.",
                 "evidence": evidence, "supporting_sentences": [[1]], "meta": {"id": f"{split}2"}},
                {"label": "not_supported", "claim": "The tower is painted blue.", "evidence": evidence,
                 "supporting_sentences": [], "meta": {"id": f"{split}3"}}]
        (wice / f"{split}.jsonl").write_text(_jsonl(rows))
    return root

