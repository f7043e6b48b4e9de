"""Grounding signals on hand cases: number formats, ranges, units, names present and absent."""

import re

import numpy as np
import pytest

from inference.grounding import FEATURES, ContextIndex, grounding_features, parse_number, unsupported_spans

EIFFEL = ("The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It was built from 1887 to 1889 as "
          "the entrance arch to the 1889 World's Fair. The tower is 330 meters tall.")


def _texts(answer, context=EIFFEL, question=None):
    return [s["text"] for s in unsupported_spans(answer, context, question)]


@pytest.mark.parametrize(("word", "value"), [("1,887", 1887.0), ("3.50", 3.5), ("twelve", 12.0), ("42", 42.0),
                                              ("tower", None), ("1.2.3", None)])
def test_parse_number(word, value):
    assert parse_number(word) == value


def test_the_eiffel_answer_flags_the_year_and_the_quantity_not_paris():
    answer = "The Eiffel Tower was built in 1950 and is about 500 meters tall. It stands in Paris, France."
    assert _texts(answer) == ["1950", "500 meters"]


@pytest.mark.parametrize("answer", ["It was finished in 1888.", "It opened in 1,889.", "It is 330 m tall.",
                                    "It is 330 metres tall.", "Work took from 1887 until 1889."])
def test_supported_numbers_in_other_formats(answer):
    assert _texts(answer) == []


def test_ranges_cover_their_inner_values_but_not_wide_ones():
    idx = ContextIndex("Open 1990-1995. Tickets cost 1 to 10,000 dollars.")
    assert idx.has_number(1993.0) and not idx.has_number(1996.0)
    assert not idx.has_number(5000.0)  # a 10,000-wide range is not expanded


def test_names_present_and_absent_and_sentence_initial_words():
    ctx = "Gustave Eiffel's company designed the tower in Paris."
    assert _texts("It was designed by Gustave Eiffel in Paris.", ctx) == []
    assert _texts("It was designed by Bob Smith in Lyon.", ctx) == ["Bob Smith", "Lyon"]
    assert _texts("Designed quickly, it stands.", ctx) == []  # a capital at a sentence start is no name


@pytest.mark.parametrize(("answer", "context", "flagged"), [
    # a numbered list's markers are no claims; the steps' own numbers still are
    ("Steps:\n6. Place the steak on the grill.\n7. Cook it for 9 minutes.", "Place the steak on the grill.",
     ["9 minutes"]),
    ("Step 4: Bake at 180 degrees.", "Bake at 180 degrees.", []),
    # a reference to the answer's own steps is no claim either; a step it does not have is
    ("Steps:\n4. Place a drop.\n5. Spread it.\n6. Repeat step 4 and 5.", "Place a drop and spread it.", []),
    ("Steps:\n4. Place a drop.\n5. Repeat steps 9 to 10.", "Place a drop.", ["9", "10"]),
    # a count of the answer's own text, the scale of a rating, ordinals, "one"
    ("Here is a summary in 108 words: the tower opened.", "The tower opened.", []),
    ("It has 3.5 out of 5 stars.", '{"stars": 3.5}', []),
    ("It has 4 out of 5 stars.", '{"stars": 3.5}', ["4"]),
    ("A third reviewer liked it, and one customer left.", "A reviewer liked it. A customer left.", []),
    ("It has three and a half stars.", '{"stars": 3.5}', []),
    ("It has three and a half stars.", '{"stars": 4.5}', ["three", "half stars"]),
    # 12-hour clock against a 24-hour record, either way round
    ("It opens at 11:30 AM and closes at 8:00 PM.", '{"hours": {"Monday": "11:30-20:00"}}', []),
    ("It closes at 9 PM.", '{"hours": {"Monday": "11:30-20:00"}}', ["9 PM"]),
    ("It closes at 20:00.", "Open until 8 pm.", []),
])
def test_numbers_that_are_no_claims_and_clock_times(answer, context, flagged):
    assert _texts(answer, context) == flagged


@pytest.mark.parametrize(("answer", "context"), [
    ("It is in California.", '{"city": "Fresno", "state": "CA"}'),  # a state's code in a record
    ("It offers Takeout and free Wi-Fi.", '{"RestaurantsTakeOut": true, "WiFi": "free"}'),  # camel-case keys
    ("He was born in the US.", "He was born in the U.S. in 1950."),  # an acronym without its dots
    ("Guests mention the TVs.", "Every room has a TV."),  # an acronym's plural
    ("A Venezuelan court ruled.", "A court in Venezuela ruled."),  # a demonym of a named place
    ("The plan: Using color helps.", "Color helps."),  # a capital after a heading's colon starts a sentence
    ("Pros:\n* Convenient parking.\n- Limited seating.", "Parking is convenient; seating is limited."),
])
def test_names_in_other_spellings_and_capitals_after_list_markers_are_no_unsupported_names(answer, context):
    assert _texts(answer, context) == []


@pytest.mark.parametrize(("answer", "context", "flagged"), [
    # a scale word or suffix states the product, whichever way either side writes it
    ("Revenue was $2.5 million.", "Revenue was $2,500,000.", []),
    ("About 1,200,000 people live there.", "The population is 1.2 million.", []),
    ("The population was 3.4 million in 2020.", "The population was 3.4m in 2020.", []),
    ("Revenue was 2.5 million dollars.", "Revenue was $2.5 million.", []),
    ("Revenue was $2.5 billion.", "Revenue was $2.5 million.", ["2.5 billion"]),  # the scale is the claim
    ("About 12 million people live there.", "The population is 1.2 million.", ["12 million people"]),
    # compound number words, dotted thousands, degrees
    ("She won 25 awards.", "She won twenty-five awards.", []),
    ("She won thirty-five awards.", "She won 25 awards.", ["thirty-five"]),
    ("She won thirty five awards.", "She won 35 awards.", []),
    ("The company has 1,500 employees.", "The company has 1.500 employees.", []),
    ("The company has 2,500 employees.", "The company has 1.500 employees.", ["2,500"]),
    ("Temperatures reach 30 degrees Celsius.", "Temperatures reach 30°C.", []),
    ("Temperatures reach 40 degrees Celsius.", "Temperatures reach 30°C.", ["40 degrees"]),
    # a country's names and demonyms; a pronoun "us" is no country
    ("The firm is based in the United Kingdom.", "The firm is based in the UK.", []),
    ("The firm is British.", "The firm is based in the United Kingdom.", []),
    ("A Canadian court ruled.", "A court in Canada ruled.", []),
    ("The firm is French.", "The firm is based in the UK.", ["French"]),
    ("The firm is American.", "Contact us for details.", ["American"]),
    # dates: numeric dates either way round, abbreviated months and weekdays; "May" the month, not the verb
    ("It was released on March 31, 1889.", "Released on 1889-03-31.", []),
    ("It was released on 31 March 1889.", "Released on 31.03.1889.", []),
    ("It was released on 03/31/1889.", "It was released on 31 March 1889.", []),
    ("It was released on September 5, 2001.", "Released on Sept. 5, 2001.", []),
    ("The event is on Mon.", "The event is on Monday.", []),
    ("It was released on April 30, 1889.", "Released on 1889-03-31.", ["April 30"]),
    ("It was released on 31 May 1889.", "Released on 31/03/1889.", ["May"]),
    ("May 5 is the date.", "The date is 5 June.", ["May"]),
    ("Prices may rise by 5 percent. The Sun rose.", "Prices could rise by 5 percent. The sun rose.", []),
    ("It opens Wed 5 June.", "It opens Thursday, June 5.", ["Wed"]),
    # addresses, titles, compass points, hyphenated names, derived names, the context's own format
    ("It is on Hollister Avenue.", '{"address": "5650 Hollister Ave"}', []),
    ("It is on North Fairview Avenue.", '{"address": "N Fairview Ave"}', []),
    ("It is on South Fairview Avenue.", '{"address": "N Fairview Ave"}', ["South"]),
    ("Critics named Rep. Santos.", "Representative George Santos spoke.", []),
    ("It is an American-style diner.", '{"categories": "American (New), Diners"}', []),
    ("It is a Mexican-style diner.", '{"categories": "American (New), Diners"}', ["Mexican-style"]),
    ("Soldiers from Texan bases left.", "Soldiers left bases in Texas.", []),
    ("It serves Eastern food.", "It serves food from the East.", []),
    ("The data in JSON format says it opens at 9.", '{"hours": "9-17"}', []),
    ("The data in JSON format says it opens at 9.", "Hours: 9-17", ["JSON"]),
    # a closing quote ends a sentence; an acronym the answer defines after its words is no new name
    ('One said it was "the bomb!!" Another liked it.', "One said it was the bomb. A second liked it.", []),
    ("The American Pharmacists Association (APhA) voted.", "The American Pharmacists Association voted.", []),
    ("The American Pharmacists Association (AMA) voted.", "The American Pharmacists Association voted.", ["AMA"]),
    # an acronym the context names, spelt out by the answer; one letter more on an acronym; plural
    # demonyms and abbreviations; -ic adjectives. A name the context lacks in any form stays flagged.
    ("The Islamic State (ISIS) attacked the town.", "ISIS fighters attacked the town.", []),
    ("The Islamic State (ISIS) attacked the town.", "Militants attacked the town.", ["Islamic State (ISIS"]),
    ("The World Health Organization (WHO) warned.", "The WHO warned on Monday.", []),
    ("The LGBTQ community reacted.", "The LGBT community reacted.", []),
    ("The LGBTQ community reacted.", "The community reacted.", ["LGBTQ"]),
    ("Thousands fled to Somalia.", "Thousands of Somalis fled.", []),
    ("Thousands fled to Somalia.", "Thousands of Kenyans fled.", ["Somalia"]),
    ("The room has two TVs.", "The room has two televisions.", []),
    ("It was a summit of the Western Hemisphere.", "It was a western hemispheric summit.", []),
    ("Islamic scholars met.", "Scholars of Islam met.", []),
    ("It held the line. &nbsp;However, the army left.", "It held the line, but the army left.", []),
])
def test_other_spellings_of_numbers_units_and_countries(answer, context, flagged):
    assert _texts(answer, context) == flagged


def test_a_state_code_only_counts_as_its_state_in_capitals():
    assert _texts("It is in California.", "It is ca. 20 miles away.") == ["California"]


def test_the_question_counts_as_context():
    assert _texts("It is in Lyon.", "A tower.", question="Is the tower in Lyon?") == []


def test_token_features_follow_the_words_they_overlap():
    answer = "Built in 1950."
    offsets = [(0, 5), (6, 8), (9, 11), (11, 13), (13, 14)]  # "19" + "50" are sub-word tokens of one number
    f = grounding_features(answer, EIFFEL, None, offsets)
    assert f.shape == (5, len(FEATURES)) and f.dtype == np.float32
    num = FEATURES.index("number_unsupported")
    assert f[:, num].tolist() == [0, 0, 1, 1, 0]
    assert f[1, FEATURES.index("function_word")] == 1 and f[4, FEATURES.index("function_word")] == 1


# ---- falsy_field: the answer asserts a field the record sets to false or leaves empty -------------------------

YELP = ('{"name": "Cafe X", "attributes": {"OutdoorSeating": false, "WiFi": null, "RestaurantsTakeOut": true, '
        '"RestaurantsDelivery": "False", "Alcohol": "none", "Ambience": {"romantic": false, "casual": true}}}')


def _falsy(answer, context=YELP):
    from inference.grounding import word_signals
    col = FEATURES.index("falsy_field")
    return [answer[s:e] for s, e, f in word_signals(answer, ContextIndex(context)) if f[col]]


def test_falsy_fields_of_a_json_record_flag_the_words_that_assert_them():
    assert _falsy("The restaurant offers outdoor seating, free WiFi and a romantic setting.") == [
        "outdoor", "seating", "WiFi", "romantic"]
    # "restaurant" also names RestaurantsTakeOut, which is true: a word of a field with a value is never flagged
    assert "restaurant" not in _falsy("The restaurant offers delivery.")


def test_negated_claims_about_falsy_fields_are_faithful():
    assert _falsy("It does not offer outdoor seating or delivery, and there is no WiFi.") == []
    assert _falsy("It serves drinks without alcohol.") == []
    # the negation's scope ends at the clause: "no WiFi, but offers delivery" asserts delivery
    assert _falsy("The cafe has no WiFi, but offers delivery.") == ["delivery"]


def test_falsy_fields_in_text_lines_fragments_and_prose():
    from inference.grounding import falsy_field_stems
    assert falsy_field_stems("Outdoor Seating: no\nTake Out: yes\n- Wi Fi: none") >= {"outdoor", "seat"}
    # a window may hold a fragment of the record: the fields it shows still count
    assert "wifi" in falsy_field_stems('..."WiFi": null, "Caters": tr')
    assert falsy_field_stems("The tower is 330 meters tall. Seating: limited.") == set()  # prose: nothing
    assert _falsy("Outdoor seating is available.", EIFFEL) == []


def test_quantity_kinds_match_units_across_spellings_and_tell_years_from_counts():
    from inference.grounding import quantity_kinds
    assert quantity_kinds("330 metres, 500 meters, 330 m") == ["unit:meter"] * 3
    assert quantity_kinds("5 feet or 3 ft; 10 km or 7 kilometres") == ["unit:foot"] * 2 + ["unit:kilometer"] * 2
    assert quantity_kinds("built in 1889 for 1,200 guests, rated 42") == ["year", "number", "number"]
    assert quantity_kinds("Bob Smith") == []


def _word_features(answer, context=EIFFEL):
    """{word: feature row} of the answer's words (each word once in these hand cases)."""
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\w+", answer)]
    feats = grounding_features(answer, context, None, offsets)
    return {answer[s:e]: dict(zip(FEATURES, row)) for (s, e), row in zip(offsets, feats)}


def test_copied_text_and_new_relations_between_supported_words():
    answer = "The tower is 330 meters tall. The entrance arch was built in Paris."
    f = _word_features(answer)
    # "The tower is 330" is copied verbatim from the context: both copy signals
    assert f["tower"]["copied_bigram"] == 1.0 and f["tower"]["copied_4gram"] == 1.0
    # "entrance arch" is a pair of the context; "arch ... built" and "built ... Paris" are not, though every
    # word is in the context ("was built" and "in Paris" are, as bigrams)
    assert f["arch"]["pair_unsupported"] == 0.0 and f["arch"]["copied_bigram"] == 1.0
    assert f["built"]["word_unsupported"] == 0.0 and f["built"]["pair_unsupported"] == 1.0
    assert f["built"]["copied_bigram"] == 1.0 and f["built"]["copied_4gram"] == 0.0
    assert f["Paris"]["pair_unsupported"] == 1.0 and f["Paris"]["copied_4gram"] == 0.0  # "in Paris" is copied


def test_positions_in_the_answer():
    answer = "First sentence here. Second one. Third one. Fourth one. Fifth one."
    f = _word_features(answer, context="unrelated")
    assert f["First"]["answer_position"] == 0.0 and f["First"]["sentence_position"] == 0.0
    assert f["Second"]["sentence_position"] == pytest.approx(1 / 3)
    assert f["Fourth"]["sentence_position"] == 1.0 and f["Fifth"]["sentence_position"] == 1.0
    assert f["Fifth"]["answer_position"] == pytest.approx(answer.index("Fifth") / len(answer))


def test_combiner_modes_keep_the_copy_signals_to_their_own_mode():
    from inference.grounding import COPY_FEATURES
    from training.detector import CalibrationConfig
    from training.detector_scoring import COMBINER_MODES

    assert not set(COPY_FEATURES) & set(COMBINER_MODES["all"])  # the recipes' "all" has no copy signals
    assert set(COPY_FEATURES) <= set(COMBINER_MODES["copy"]) and set(COMBINER_MODES["all"]) < set(COMBINER_MODES["copy"])
    CalibrationConfig(combiner=["off", "copy"]).validate()
    with pytest.raises(ValueError, match="calibration.combiner"):
        CalibrationConfig(combiner=["everything"]).validate()


def test_copy_signals_are_skipped_on_request_and_the_rest_is_unchanged():
    from inference.grounding import COPY_FEATURES

    answer = "The tower is 330 meters tall. It was built in 1950 by Bob Smith."
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]", answer)]
    full = grounding_features(answer, EIFFEL, None, offsets)
    lean = grounding_features(answer, EIFFEL, None, offsets, copy=False)
    copy_cols = [FEATURES.index(f) for f in COPY_FEATURES]
    rest = [j for j in range(len(FEATURES)) if j not in copy_cols]
    assert not lean[:, copy_cols].any() and full[:, copy_cols].any()
    np.testing.assert_array_equal(full[:, rest], lean[:, rest])



def test_the_combiners_token_features_keep_the_loose_rules():
    # The combiner was measured best on the looser signals (docs/detector.md): a list marker absent from the
    # context and a state's full name against its code still fire there; the strict check names neither.
    answer, context = "Steps:\n6. It is in California.", '{"state": "CA", "steps": "It is in a state."}'
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\w+", answer)]
    feats = grounding_features(answer, context, None, offsets)
    number, entity = FEATURES.index("number_unsupported"), FEATURES.index("entity_unsupported")
    assert feats[1, number] == 1.0 and feats[-1, entity] == 1.0  # "6", "California"
    assert _texts(answer, context) == []


def test_answer_type_ids_mark_what_the_context_lacks():
    """data.answer_types "grounding": type 3 for the tokens of an unsupported number / quantity / name, 2 for an
    unsupported content word, 1 otherwise; a DetectorInput takes them on its answer tokens only."""
    from inference.grounding import answer_type_ids, token_features, word_signals
    from inference.spans import DetectorInput

    context = "The Eiffel Tower in Paris was built from 1887 to 1889. The tower is 330 meters tall."
    answer = "The Eiffel Tower was built in 1950, stands 500 meters tall and glows near Lyon."
    words = [(m.start(), m.end()) for m in re.finditer(r"\w+", answer)]
    types = answer_type_ids(token_features(word_signals(answer, ContextIndex(context)), words))
    by_word = {answer[s:e]: t for (s, e), t in zip(words, types)}
    assert by_word["1950"] == by_word["500"] == by_word["meters"] == by_word["Lyon"] == 3
    assert by_word["glows"] == by_word["stands"] == by_word["near"] == 2
    assert by_word["Eiffel"] == by_word["built"] == by_word["tall"] == by_word["The"] == by_word["and"] == 1
    assert answer_type_ids(np.zeros((0, 11))) == []

    enc = DetectorInput(input_ids=[101, 7, 102, 8, 9, 102], attention_mask=[1] * 6,
                        token_type_ids=[0, 0, 0, 1, 1, 1], answer_start=3, answer_offsets=[(0, 2), (3, 5)])
    typed = enc.with_answer_types([3, 2])
    assert typed.token_type_ids == [0, 0, 0, 3, 2, 1] and enc.token_type_ids == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="2 answer tokens"):
        enc.with_answer_types([3])
