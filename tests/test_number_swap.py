"""Number-swap NLI pairs (training/data/number_swap.py): minimal pairs, exact labels, deterministic."""

from __future__ import annotations

import re

import pytest

from training.data.base import get_adapter
from training.data.nli import CONTRADICTION, ENTAILMENT, NEUTRAL
from training.data.number_swap import neutral_pairs, swap_pairs

PASSAGE = ("The Eiffel Tower is a wrought-iron lattice tower in Paris. It was built from 1887 to 1889 as the "
           "entrance arch of the World's Fair. The tower is 330 meters tall and has three levels for visitors. "
           "It was the tallest structure in the world until the Chrysler Building was finished.")


def test_each_sentence_gives_an_entailed_copy_and_a_contradicting_number_swap():
    pairs = list(swap_pairs(PASSAGE, "p1"))
    assert len(pairs) == 4  # PER_PASSAGE sentences with numbers, two pairs each
    for ent, con in zip(pairs[::2], pairs[1::2]):
        assert (ent.label, con.label) == (ENTAILMENT, CONTRADICTION)
        assert ent.premise == con.premise and ent.hypothesis in ent.premise
        assert con.hypothesis != ent.hypothesis and con.hypothesis not in con.premise
        # one number changed, every other word kept
        a, b = ent.hypothesis.split(), con.hypothesis.split()
        changed = [(x, y) for x, y in zip(a, b) if x != y]
        assert len(a) == len(b) and len(changed) == 1 and re.search(r"\d", changed[0][0] + changed[0][1])
        assert ent.meta["pair_id"].startswith("number_swap:p1:") and ent.meta["domain"] == "number_swap"
        assert ent.meta["train_only"] and con.meta["train_only"]  # minimal pairs never straddle a split


def test_pairs_depend_only_on_the_passage():
    assert [r.to_dict() for r in swap_pairs(PASSAGE, "k")] == [r.to_dict() for r in swap_pairs(PASSAGE, "k")]
    assert list(swap_pairs("No numbers are written in this passage at all, only words here.", "k")) == []


@pytest.mark.data
def test_real_number_swap_pairs(data_dir):
    if not (data_dir / "curriculum_nli").is_dir():
        pytest.skip("curriculum_nli not in the data dir")
    recs = get_adapter("number_swap").load(data_dir)
    assert len(recs) == 3304  # 1,652 sentences of distinct ConTRoL training passages, two pairs each
    assert sum(r.label == ENTAILMENT for r in recs) == sum(r.label == CONTRADICTION for r in recs)
    assert len({r.meta["pair_id"] for r in recs}) == len(recs)


def test_neutral_pairs_hold_a_sentence_of_the_passage_outside_the_premise_with_none_of_its_numbers():
    passage = PASSAGE + (" Its lights were switched on in 1985 for the first time. About 7 million people visit "
                         "it every year, most of them in summer.")
    picked = {r.meta["pair_id"].rsplit(":", 1)[0] for r in swap_pairs(passage, "p")}
    neutral = list(neutral_pairs(passage, "p"))
    assert neutral and all(r.label == NEUTRAL and r.meta["train_only"] for r in neutral)
    for r in neutral:
        assert r.meta["pair_id"].rsplit(":", 1)[0] in picked  # one per sentence swap_pairs picked
        assert r.hypothesis in passage and r.hypothesis not in r.premise
        assert not set(re.findall(r"\d+", r.hypothesis)) & set(re.findall(r"\d+", r.premise))
    assert [x.to_dict() for x in neutral] == [x.to_dict() for x in neutral_pairs(passage, "p")]
