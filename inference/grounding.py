"""Grounding signals a small encoder misses: answer numbers, quantities, dates, names and words the context lacks.

A 22M-parameter encoder that reads 512 tokens is weak at exact comparison ("330" against "500"), so the
Detector combines its token probabilities with these cheap, exact signals (see inference.detector_stage).

    feats = grounding_features(answer, context, question, answer_offsets)   # (n_tokens, len(FEATURES))

Per answer word (numbers normalised: `1,887` = `1887`, `3.50` = `3.5`, `twelve` = `12`; a range `1887-1889` or
`1887 to 1889` in the context covers every number between its ends, so `1888` is supported; `330 m` and
`330 meters` are the same quantity because only the value is compared):

    number_unsupported   a number (or the unit word right after it: "500 meters") absent from the context
    entity_unsupported   a capitalised word (a name) absent from the context
    word_unsupported     a content word (not a stopword) absent from the context, after light stemming
    function_word        a stopword or punctuation: never the evidence of a hallucination by itself
    sentence_unsupported share of the content words of the token's sentence that are absent from the context
    falsy_field          a content word, not negated in its clause ("no", "not", "without" ... in the five words
                         before it), that names a field the context sets to false or leaves empty (`"OutdoorSeating":
                         false`, `"WiFi": null`, `Outdoor Seating: no`) and no field it sets to a value
                         ("offers outdoor seating"): the word is present, so word_unsupported misses it, yet the
                         record states the opposite or nothing. On the 611 local RAGTruth responses 14.2% of the
                         content words inside hallucinated Data2txt spans have it, 0.65% of those outside
                         (docs/detector.md)
    copied_bigram        the word is part of a two-word sequence that occurs verbatim in the context (copied)
    copied_4gram         ... of a four-word sequence that occurs verbatim in the context (copied text)
    pair_unsupported     a content word whose pair with the previous content word of the answer (adjacent, or
                         one content word apart) never occurs in the context: supported words in a new relation
    answer_position      where the word starts in the answer (0 = start, 1 = end)
    sentence_position    the word's sentence in the answer: 0, 1/3, 2/3, 1 for the first, second, third, later

The question counts as context (an answer may repeat it). `ContextIndex(..., strict=True)`, which
`unsupported_spans` uses for what is stated as fact (explanations, and spans flagged whatever the model says),
counts only the answer's claims against every spelling of the context (see ContextIndex); the combiner's token
features keep the rules above. Features are per answer *token* (from its word, by
character overlap), so they line up with the Detector's per-token probabilities.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cached_property
from itertools import pairwise

import numpy as np

from inference.structured import key_words

# The copy, pair and position signals are only used by the combiner mode "copy" (a recipe's
# calibration.combiner): measured on 2026-12-04, not adopted by the recipes (docs/experiments.md).
COPY_FEATURES = ("copied_bigram", "copied_4gram", "pair_unsupported", "answer_position", "sentence_position")
FEATURES = ("number_unsupported", "entity_unsupported", "word_unsupported", "function_word",
            "sentence_unsupported", "falsy_field", *COPY_FEATURES)

STOPWORDS = frozenset(["a", "an", "the", "and", "or", "but", "if", "then", "than", "of", "to", "in", "on", "at", "by", "for", "with", "from", "as", "is", "are", "was", "were", "be", "been", "being", "it", "its", "this", "that", "these", "those", "there", "their", "they", "them", "he", "she", "his", "her", "we", "our", "you", "your", "i", "me", "my", "not", "no", "do", "does", "did", "has", "have", "had", "can", "could", "will", "would", "should", "may", "might", "must", "also", "which", "who", "whom", "whose", "what", "when", "where", "why", "how", "all", "any", "each", "some", "such", "so", "very", "more", "most", "other", "into", "about", "over", "after", "before", "between", "during", "through", "up", "down", "out", "only", "own", "same", "too", "just", "both", "few", "many", "much", "one", "s", "t", "off", "again", "further", "once", "here", "am", "while", "until", "against", "under", "above", "below", "own"])

_NUMBER_WORDS = {w: i for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"])}
_NUMBER_WORDS.update({"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
                      "ninety": 90, "hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9,
                      "dozen": 12, "half": 0.5, "first": 1, "second": 2, "third": 3})
_UNITS = frozenset(["m", "meter", "meters", "metre", "metres", "km", "kilometer", "kilometers", "kilometres", "mile", "miles", "ft", "foot", "feet", "inch", "inches", "cm", "mm", "kg", "g", "gram", "grams", "kilogram", "kilograms", "pound", "pounds", "lb", "lbs", "ton", "tons", "tonnes", "percent", "%", "year", "years", "month", "months", "week", "weeks", "day", "days", "hour", "hours", "minute", "minutes", "second", "seconds", "million", "billion", "thousand", "hundred", "dollars", "dollar", "usd", "euros", "euro", "people", "star", "stars", "reviews", "review", "times", "degrees"])

# Numbers that are no claim about the world (2026-12-05; the false alarms of the number signal on three of five
# local RAGTruth folds, docs/detector.md "Grounding signals and the exact check"): the marker of a numbered list
# ("6. Place the steak"), a count of the answer's own text ("a summary in 108 words"), the scale of a rating
# ("3.5 out of 5 stars"), and ordinals ("a third reviewer", "their first two albums").
_LIST_MARKER = re.compile(r"^[ \t]*(?:[-*•][ \t]+|(\d{1,3})[.)][ \t]+|step[ \t]+(\d{1,3})[:.][ \t]+)",
                          re.IGNORECASE | re.MULTILINE)
_SELF_COUNT = frozenset(["word", "words", "sentence", "sentences", "character", "characters", "paragraph",
                         "paragraphs"])
_SCALE = re.compile(r"\bout\s+of\s+$", re.IGNORECASE)
_STEP_REFERENCE = re.compile(r"\bsteps?\s+(?:\d{1,3}\s*(?:,|and|or|to|-|–)\s*)*$", re.IGNORECASE)  # "repeat step 4 and"

_SCALES = frozenset([5.0, 10.0])
_ORDINALS = frozenset(["first", "second", "third"])
_HALF = re.compile(r"\b(\w+)\s+and\s+a\s+half\b", re.IGNORECASE)  # "three and a half stars" = 3.5
_CLOCK_PM = re.compile(r"^(?::\d{2})?\s*(?:pm|p\.m\.)", re.IGNORECASE)  # after the hour: "8 PM", "8:00 p.m."
_CLOCK_PM_IN_TEXT = re.compile(r"(?<![\w.:])(\d{1,2})(?::\d{2})?\s*(?:pm|p\.m\.)", re.IGNORECASE)
_HEADING = re.compile(r":[ \t]+(?=[A-Z])")  # "Add color: Using color ..." starts a sentence
# The two-letter codes of the US states and DC, as structured records give them ("state": "CA"): an answer that
# says "California" states what the record says.
US_STATES = {"AL": "Alabama", "AK": "Alaska", "AZ": "Arizona", "AR": "Arkansas", "CA": "California",
             "CO": "Colorado", "CT": "Connecticut", "DE": "Delaware", "DC": "District of Columbia", "FL": "Florida",
             "GA": "Georgia", "HI": "Hawaii", "ID": "Idaho", "IL": "Illinois", "IN": "Indiana", "IA": "Iowa",
             "KS": "Kansas", "KY": "Kentucky", "LA": "Louisiana", "ME": "Maine", "MD": "Maryland",
             "MA": "Massachusetts", "MI": "Michigan", "MN": "Minnesota", "MS": "Mississippi", "MO": "Missouri",
             "MT": "Montana", "NE": "Nebraska", "NV": "Nevada", "NH": "New Hampshire", "NJ": "New Jersey",
             "NM": "New Mexico", "NY": "New York", "NC": "North Carolina", "ND": "North Dakota", "OH": "Ohio",
             "OK": "Oklahoma", "OR": "Oregon", "PA": "Pennsylvania", "RI": "Rhode Island", "SC": "South Carolina",
             "SD": "South Dakota", "TN": "Tennessee", "TX": "Texas", "UT": "Utah", "VT": "Vermont",
             "VA": "Virginia", "WA": "Washington", "WV": "West Virginia", "WI": "Wisconsin", "WY": "Wyoming"}
_STATE_CODE = re.compile(r"\b(" + "|".join(US_STATES) + r")\b")
# Other spellings of the same claim that the strict rules accept (2026-12-06, from the usual ways of writing
# numbers, units and countries, not from any data set's errors; tests/test_grounding.py has the hand cases):
# a scale word or suffix after a number states the product ("2.5 million", "$2.5m", "3.4bn" = 2,500,000 /
# 3,400,000,000); "twenty-five" = 25; "1.500" may be the European 1,500; "30°C" = "30 degrees Celsius"; and one
# country's names and demonyms ("UK", "United Kingdom", "Britain", "British").
_SCALE_WORDS = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
_SCALED_IN_TEXT = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*"
                             r"(thousand|million|billion|trillion|bn|mn|m|k)\b", re.IGNORECASE)
_SCALE_SUFFIXES = {"k": 1e3, "m": 1e6, "mn": 1e6, "bn": 1e9}
_DOTTED_THOUSANDS = re.compile(r"(?<![\w.,])\d{1,3}(?:\.\d{3})+(?![.,]?\d)")
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_COMPOUND = re.compile(r"\b(" + "|".join(_TENS) + r")[- ](one|two|three|four|five|six|seven|eight|nine)\b",
                       re.IGNORECASE)
_DEGREES = re.compile(r"°\s*([CF])\b")
_COUNTRY_CODES = re.compile(r"(?<![\w.])(US|U\.S\.|USA|U\.S\.A\.|UK|U\.K\.|UAE|EU)(?![\w])")
_COUNTRIES = [  # names and demonyms of one country; a code above counts as its group's first name
    ("united states", "us", "usa", "america", "american", "americans"),
    ("united kingdom", "uk", "britain", "great britain", "british"),
    ("united arab emirates", "uae", "emirati"), ("european union", "eu"),
    ("netherlands", "holland", "dutch"), ("france", "french"), ("germany", "german"), ("spain", "spanish"),
    ("italy", "italian"), ("china", "chinese"), ("japan", "japanese"), ("switzerland", "swiss"),
    ("sweden", "swedish"), ("denmark", "danish"), ("norway", "norwegian"), ("finland", "finnish"),
    ("poland", "polish"), ("portugal", "portuguese"), ("greece", "greek"), ("turkey", "turkish"),
    ("ireland", "irish"), ("scotland", "scottish"), ("wales", "welsh"), ("england", "english"),
    ("canada", "canadian"), ("mexico", "mexican"), ("brazil", "brazilian"), ("egypt", "egyptian"),
    ("peru", "peruvian"), ("argentina", "argentine", "argentinian"), ("thailand", "thai"),
    ("vietnam", "vietnamese"), ("philippines", "filipino", "philippine"), ("israel", "israeli"),
    ("pakistan", "pakistani"), ("iraq", "iraqi"), ("iran", "iranian"), ("afghanistan", "afghan"),
    ("belgium", "belgian"), ("ukraine", "ukrainian"), ("hungary", "hungarian"), ("czechia", "czech republic", "czech"),
    ("saudi arabia", "saudi"), ("new zealand", "new zealander"), ("lebanon", "lebanese"), ("nepal", "nepalese", "nepali"),
    ("somalia", "somali"), ("yemen", "yemeni"), ("qatar", "qatari"), ("kuwait", "kuwaiti"), ("oman", "omani"),
    ("bangladesh", "bangladeshi"), ("sudan", "sudanese"), ("taiwan", "taiwanese"), ("senegal", "senegalese"),
    ("iceland", "icelandic"), ("kurdistan", "kurdish", "kurd"), ("russia", "russian"), ("india", "indian"),
]
_CODE_GROUP = {"US": 0, "U.S.": 0, "USA": 0, "U.S.A.": 0, "UK": 1, "U.K.": 1, "UAE": 2, "EU": 3}
# Abbreviations of addresses, titles and a few common words: one group, one name ("Hollister Ave" = "Hollister
# Avenue", "Rep." = "Representative", "N Fairview" = "North Fairview").
_ABBREVIATIONS = [("avenue", "ave"), ("street", "st"), ("boulevard", "blvd"), ("road", "rd"), ("drive", "dr"),
                  ("lane", "ln"), ("highway", "hwy"), ("parkway", "pkwy"), ("court", "ct"), ("place", "pl"),
                  ("square", "sq"), ("suite", "ste"), ("mount", "mt"), ("fort", "ft"), ("saint", "st"),
                  ("representative", "rep"), ("senator", "sen"), ("governor", "gov"), ("president", "pres"),
                  ("doctor", "dr"), ("professor", "prof"), ("general", "gen"), ("captain", "capt"),
                  ("television", "tv"), ("north", "n"), ("south", "s"), ("east", "e"), ("west", "w")]
_COMPASS = re.compile(r"\b([NSEW])\.?\s+(?=[A-Z][a-z])")  # "N Fairview Ave": a one-letter word is a direction here
_HTML_SPACE = re.compile(r"&(?:nbsp|#160|ensp|emsp|thinsp);")
_JSON_OBJECT = re.compile(r"[{,]\s*\"[^\"]{1,60}\"\s*:")  # the context holds JSON: "JSON" names its format
# Dates: a month or weekday by any of its names ("Sept." = "September"), and a numeric date's month ("1889-03-31",
# "31/03/1889", "03/31/1889": a part up to 12 may be the month either way round) = the month's name. "May" is a
# stopword, so in an answer it counts as the month only capitalised and next to a number ("31 May 1889").
_MONTH_NAMES = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
                "november", "december"]
_MONTHS = {name: i + 1 for i, name in enumerate(_MONTH_NAMES)}
_MONTHS.update({"jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9, "oct": 10,
                "nov": 11, "dec": 12})
_WEEKDAY_NAMES = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_WEEKDAYS = {name: i for i, name in enumerate(_WEEKDAY_NAMES)}
_WEEKDAYS.update({"mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4, "sat": 5,
                  "sun": 6})
_NUMERIC_DATE = re.compile(r"(?<![\w/.-])(?:(\d{4})-(\d{1,2})-(\d{1,2})|(\d{1,2})([/.])(\d{1,2})\5(\d{4}|\d{2}))(?![\w/-]|\.\d)")
_CAMEL_WORD = re.compile(r"\b[A-Za-z]*[a-z][A-Z][A-Za-z]*\b")  # RestaurantsTakeOut, OutdoorSeating

_WORDS_PLAIN = re.compile(r"\w+")
_WORD = re.compile(r"\w+(?:[.,'’-]\w+)*")
_WORD_SEPARATOR = re.compile(r"[.,'’-]")  # the pieces of "U.S." / "1,887" / "well-known"
_JOINER = re.compile(r"[.'’-]")  # dropped to join a word's pieces: "U.S." -> "us", "Wi-Fi" -> "wifi"
_NUM = re.compile(r"^\d{1,3}(?:,\d{3})+(?:\.\d+)?$|^\d+(?:\.\d+)?$")
_NUM_IN_TEXT = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.])\d+(?:\.\d+)?")
_RANGE = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+)\s*(?:-|–|—|to|through|until|and)\s*(\d{1,3}(?:,\d{3})+|\d+)")
_SENT = re.compile(r"[^.!?\n]+[.!?]?")
_MAX_RANGE = 500  # a range wider than this ("1 to 10,000") is not expanded: it would support everything
# A field of a JSON (or Python-literal) record and its value, wherever the record sits in the context (a window may
# hold a fragment of it); and a "Key: value" line (inference.structured's text rendering).
_FIELD = re.compile(r"""["']([A-Za-z_][\w ]{0,60})["']\s*:\s*("(?:[^"\\]|\\.)*"|'[^']*'|\[\s*\]|\{\s*\}|[^,{}\[\]\s]+)""")
_FIELD_LINE = re.compile(r"^[ \t]*-?[ \t]*([A-Za-z][\w ]{0,60}):[ \t]*(no|none|false|null)[ \t]*$", re.IGNORECASE | re.MULTILINE)
_FALSY_VALUE = re.compile(r"""^(?:false|null|none|\[\s*\]|\{\s*\}|(["'])(?:no|none|false|null|)\1)$""", re.IGNORECASE)
_CLAUSE_BREAK = re.compile(r"[,;:]|\b(?:but|however|although|though|while|whereas)\b", re.IGNORECASE)
_NEGATION = re.compile(r"\b(?:not|no|never|without|lacks?|lacking|neither|nor|none|cannot|unavailable)\b|n't\b|n’t\b",
                       re.IGNORECASE)


def content_words(text: str) -> set[str]:
    """The lower-cased words of `text` that are not stopwords (what premise and window ranking compare)."""
    return {w for w in _WORDS_PLAIN.findall(text.lower()) if w not in STOPWORDS}


def parse_number(word: str) -> float | None:
    """'1,887' -> 1887.0, '3.50' -> 3.5, 'twelve' -> 12.0; anything else -> None."""
    w = word.lower().strip()
    if w in _NUMBER_WORDS:
        return float(_NUMBER_WORDS[w])
    if _NUM.match(w):
        try:
            return float(w.replace(",", ""))
        except ValueError:
            return None
    return None


def _stem(w: str) -> str:
    for suffix in ("'s", "’s", "ies", "es", "s", "ed", "ing", "ly"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            return w[: -len(suffix)]
    return w


def _key_stems(key: str) -> set[str]:
    """`RestaurantsTakeOut` -> {restaurant, take, restaurantstakeout}: the stems of a field name's words (split as
    inference.structured renders keys) and of the whole name (`WiFi` -> wifi), stopwords left out."""
    words = [w.lower() for w in key_words(key).split()] + [key.lower()]  # + "wifi" for WiFi
    return {_stem(w) for w in words if len(w) > 2 and w not in STOPWORDS}


def falsy_field_stems(text: str) -> set[str]:
    """Stems of the words of the fields `text` sets to false / null / empty / "no", minus those of any field it
    sets to a value (`"RestaurantsTakeOut": true` keeps "restaurant" out when `"RestaurantsDelivery": false`)."""
    falsy: set[str] = set()
    truthy: set[str] = set()
    for m in _FIELD.finditer(text):
        (falsy if _FALSY_VALUE.match(m.group(2).strip()) else truthy).update(_key_stems(m.group(1)))
    for m in _FIELD_LINE.finditer(text):
        falsy.update(_key_stems(m.group(1)))
    return falsy - truthy


class ContextIndex:
    """What the context (and question) contain, normalised for the comparisons above.

    `strict`: the rules of the exact check (`unsupported_spans`: the terms an explanation names, and the spans
    flagged whatever the model says): only an answer's claims about the world count, against every spelling of
    the context (no list markers, counts of the answer's own text, rating scales or ordinals; 12-hour clock
    times, state codes, camel-case field names, dotless acronyms, plurals and demonyms; scaled numbers, number
    words, dotted thousands, degrees, country names and codes, numeric and abbreviated dates). The combiner's token
    features keep the looser rules it was measured best with (strict features: -2.1 span F1 under the
    cross-fold calibration; docs/detector.md "Grounding signals and the exact check")."""

    def __init__(self, text: str, strict: bool = False):
        self.strict = strict
        words = [w.lower() for w in _WORD.findall(text)]
        distinct = set(words)  # a long context repeats most of its words: the sets below need each once
        pieces = [p for w in distinct if _WORD_SEPARATOR.search(w) for p in _WORD_SEPARATOR.split(w) if p]
        joined = []
        if strict:
            joined = [_JOINER.sub("", w) for w in distinct if _JOINER.search(w)]  # U.S. -> us
            for m in _CAMEL_WORD.finditer(text):  # RestaurantsTakeOut -> restaurants, take, out, takeout
                parts = key_words(m.group()).lower().split()
                pieces += parts + [a + b for a, b in pairwise(parts)]
            for m in _STATE_CODE.finditer(text):  # "state": "CA" -> california
                pieces += US_STATES[m.group()].lower().split()
            alpha = set(re.findall(r"[A-Za-z]+", text))  # the distinct letter runs, shared by the lookups below
            lowered_words = {w.lower() for w in alpha}
            pieces += _other_names(text, lowered_words)
        self.months, self.weekdays, date_names, date_numbers = _dates(text, alpha) if strict else (set(), set(), [], set())
        pieces += date_names
        self.words = distinct | set(pieces) | set(joined)
        self.stems = {_stem(w) for w in self.words}
        self.numbers: set[float] = set()
        for m in _NUM_IN_TEXT.finditer(text):
            v = parse_number(m.group())
            if v is not None:
                self.numbers.add(v)
        for w in distinct:
            v = _NUMBER_WORDS.get(w)
            if v is not None:
                self.numbers.add(float(v))
        for m in _RANGE.finditer(text):
            a, b = parse_number(m.group(1)), parse_number(m.group(2))
            if a is not None and b is not None and a.is_integer() and b.is_integer() and 0 < b - a <= _MAX_RANGE:
                self.numbers.update(float(x) for x in range(int(a), int(b) + 1))
        for m in _CLOCK_PM_IN_TEXT.finditer(text) if strict else ():  # "8 PM" also states 20 (o'clock)
            hour = int(m.group(1))
            if 1 <= hour <= 11:
                self.numbers.add(float(hour + 12))
        if strict:
            self.numbers |= _other_values(text, lowered_words) | date_numbers
        self.falsy = falsy_field_stems(text)
        self._sequence = words  # for the copy signals' word n-grams, built on first use

    # Word n-grams for the copy signals: sets of tuples, ~4 per context word. Built only when a combiner uses
    # them (~9 ms more for a 16K-character context; docs/detector.md).
    @cached_property
    def bigrams(self) -> set[tuple[str, str]]:
        return set(pairwise(self._sequence))

    @cached_property
    def fourgrams(self) -> set[tuple[str, ...]]:
        w = self._sequence
        return set(zip(w, w[1:], w[2:], w[3:], strict=False))

    @cached_property
    def content_pairs(self) -> set[tuple[str, str]]:
        content = [w for w in self._sequence if w not in STOPWORDS]
        return set(pairwise(content)) | set(zip(content, content[2:], strict=False))

    def has_number(self, value: float) -> bool:
        return value in self.numbers or any(abs(value - n) < 1e-9 for n in self.numbers)

    def has_word(self, word: str) -> bool:
        w = word.lower()
        if w in self.words or _stem(w) in self.stems:
            return True
        if self.strict and self._other_spelling(word, w):
            return True
        parts = [p for p in _WORD_SEPARATOR.split(w) if p]
        return bool(parts) and all(p in self.words or _stem(p) in self.stems or p in STOPWORDS for p in parts)

    def _other_spelling(self, word: str, w: str) -> bool:
        """"TVs" / "Passages" against "TV" / "Passage"; "Wi-Fi" against "WiFi"; "Venezuelan" / "Singaporean"
        against "Venezuela" / "Singapore"; strict: "Islamic" / "Islam", "Hemisphere" / "hemispheric", "LGBTQ" /
        "LGBT"."""
        bare = _JOINER.sub("", w)
        plural = w.endswith("s") and (word[:-1].isupper() or len(w) > 4)
        if bare in self.words or (plural and w[:-1] in self.words):
            return True
        if self.strict and (w.endswith("ern") and w[:-3] in self.words):  # "Eastern" against "East"
            return True
        if self.strict and len(w) > 4 and w.endswith("an") and w[:-1] + "s" in self.words:  # "Texan" / "Texas"
            return True
        if self.strict and len(w) > 5 and (  # "Islamic" / "Islam", "Hemisphere" / "hemispheric"
                (w.endswith("ic") and (w[:-2] in self.words or w[:-2] + "e" in self.words))
                or w + "ic" in self.words or (w.endswith("e") and w[:-1] + "ic" in self.words)):
            return True
        if self.strict and len(w) >= 4 and word.isupper() and w[:-1] in self.words:  # "LGBTQ" against "LGBT"
            return True
        return len(w) > 5 and ((w.endswith("n") and w[:-1] in self.words) or (w.endswith("an") and w[:-2] in self.words))


def _other_names(text: str, words: set[str]) -> list[str]:
    """Words the strict index adds for what `text` names in another way: "Celsius" for "°C", and every name and
    demonym of a country it names (`_COUNTRIES`)."""
    lowered = text.lower()  # `words`: the text's lower-cased words; a name of several words is looked up as a phrase
    groups = {_CODE_GROUP[m.group(1)] for m in _COUNTRY_CODES.finditer(text)}
    groups |= {i for i, names in enumerate(_COUNTRIES)  # a demonym in the plural names its country too ("Somalis")
               if any(len(n) > 3 and all(w in words or w + "s" in words for w in n.split())
                      and (" " not in n or re.search(rf"\b{re.escape(n)}\b", lowered)) for n in names)}
    out = [w for i in groups for n in _COUNTRIES[i] for w in n.split()]
    for m in _DEGREES.finditer(text):
        out += ["degrees", "celsius" if m.group(1) == "C" else "fahrenheit"]
    out += [u for name, u in (("celsius", "c"), ("fahrenheit", "f")) if name in words]
    out += [w for group in _ABBREVIATIONS if any(len(g) > 1 and (g in words or g + "s" in words) for g in group)
            for w in group]  # "two televisions" names TVs
    out += [{"N": "north", "S": "south", "E": "east", "W": "west"}[m.group(1)] for m in _COMPASS.finditer(text)]
    if _JSON_OBJECT.search(text):
        out.append("json")
    return out


def _dates(text: str, alpha: set[str]) -> tuple[set[int], set[int], list[str], set[float]]:
    """(months, weekdays, their names in every spelling, the numbers of numeric dates) that `text` states."""
    months: set[int] = set()
    weekdays: set[int] = set()
    for word in alpha:  # each distinct spelling once
        w = word.lower()
        if w in _MONTHS and (w != "may" or word == "May"):
            months.add(_MONTHS[w])
        elif w in _WEEKDAYS and (w in _WEEKDAY_NAMES or word[:1].isupper()):  # "sat" the verb is no day
            weekdays.add(_WEEKDAYS[w])
    numbers: set[float] = set()
    for m in _NUMERIC_DATE.finditer(text):
        numbers.update(float(g) for g in m.group(1, 2, 3, 4, 6, 7) if g)
        months.update(p for p in (int(m.group(g)) for g in _month_groups(m)) if 1 <= p <= 12)
    names = [n for n, i in _MONTHS.items() if i in months] + [n for n, i in _WEEKDAYS.items() if i in weekdays]
    return months, weekdays, names, numbers


def _month_groups(m: re.Match) -> tuple[int, ...]:
    """The groups of a _NUMERIC_DATE match that may be its month: ISO's second part, else either of the first two."""
    return (2,) if m.group(1) else (4, 6)


def _compound_value(m: re.Match) -> float:
    """The number a _COMPOUND match says: "twenty-five" -> 25."""
    return float(_TENS[m.group(1).lower()] + _NUMBER_WORDS[m.group(2).lower()])


def _other_values(text: str, words: set[str]) -> set[float]:
    """Values the strict index adds: scaled numbers ("2.5 million", "$3.4m"), compound number words
    ("twenty-five") and dotted thousands ("1.500" as 1500)."""
    values = set()
    for m in _SCALED_IN_TEXT.finditer(text):
        v = parse_number(m.group(1))
        scale = m.group(2).lower()
        if v is not None:
            values.add(v * _SCALE_WORDS.get(scale, _SCALE_SUFFIXES.get(scale, 1.0)))
    for m in _COMPOUND.finditer(text) if words & _TENS.keys() else ():
        values.add(_compound_value(m))
    for m in _DOTTED_THOUSANDS.finditer(text):
        values.add(float(m.group().replace(".", "")))
    return values


def _claim_layout(answer: str, sentence_starts: set[int]) -> tuple[set[int], dict[int, float]]:
    """The strict rules' reading of the answer's layout: the starts of numbered list markers ("6. Place ..."),
    and the values of words that say one number together: "three and a half" (at "three" and at "half": 3.5),
    "twenty-five" / "twenty five" (25 at each word). Adds the word after a list marker or a heading's colon to
    `sentence_starts` (a capital there is no name)."""
    markers = {m.start(g) for m in _LIST_MARKER.finditer(answer) for g in (1, 2) if m.group(g)}
    sentence_starts |= {m.end() for m in _LIST_MARKER.finditer(answer)} | {m.end() for m in _HEADING.finditer(answer)}
    values = {}
    for m in _COMPOUND.finditer(answer):
        values[m.start(1)] = values[m.start(2)] = _compound_value(m)
    for m in _HALF.finditer(answer):
        whole = parse_number(m.group(1))
        if whole is not None:
            values[m.start(1)] = values[m.end() - 4] = whole + 0.5
    return markers, values


def _no_claim(answer: str, start: int, end: int, value: float, next_word: str, index: ContextIndex) -> bool:
    """A number that is no claim the context lacks, under the strict rules: a count of the answer's own text
    ("in 108 words"), the scale of a rating ("out of 5"), the minutes of an hour (":00"), or an hour of the
    12-hour clock that the context gives on the 24-hour one ("8 PM" against "20:00")."""
    return (next_word in _SELF_COUNT or (value == 0 and answer[start - 1:start] == ":")
            or (value in _SCALES and bool(_SCALE.search(answer[max(0, start - 12):start])))
            or (1 <= value <= 11 and bool(_CLOCK_PM.match(answer[end:])) and index.has_number(value + 12)))


def word_signals(answer: str, index: ContextIndex, copy: bool = True) -> list[tuple[int, int, np.ndarray]]:
    """(start, end, feature vector) for each word of the answer; `copy=False` leaves the COPY_FEATURES at 0."""
    words = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(answer)]
    out: list[tuple[int, int, np.ndarray]] = []
    strict = index.strict
    # strict: a sentence starts after the quote or bracket that closed the last one ('... "the bomb!!" Another')
    lead = " \t\n\"'”’)]" if strict else None
    # strict: an HTML space an LLM left in its answer ("offensive. &nbsp;However") is a space, offsets unchanged
    spaced = _HTML_SPACE.sub(lambda m: " " * len(m.group()), answer) if strict else answer
    sentence_starts = {m.start() + len(m.group()) - len(m.group().lstrip(lead)) for m in _SENT.finditer(spaced)}
    markers, said = (_claim_layout(answer, sentence_starts) if strict else (set(), {}))
    defined = (_defined_acronyms(answer) | _known_acronym_expansions(answer, index)) if strict else set()
    # the answer's own numbered steps, which "repeat step 4 and 5" refers to: no claim about the world
    steps = {float(re.match(r"\d+", answer[m:]).group()) for m in markers}
    date_months = ({m.start(g) for m in _NUMERIC_DATE.finditer(answer) for g in _month_groups(m)}
                   if strict else set())  # the parts of a numeric date that may be its month
    prev_number: bool | None = None  # None: the previous word is no number; else whether it is unsupported
    for i, (s, e, w) in enumerate(words):
        f = np.zeros(len(FEATURES), dtype=np.float32)
        lw = w.lower()
        scale_of_previous = strict and prev_number is not None and lw in _SCALE_WORDS  # "2.5 million"
        if strict:
            value = None if lw in _ORDINALS or lw in STOPWORDS or scale_of_previous else said.get(s, parse_number(w))
        else:
            value = None if lw in STOPWORDS and lw != "one" else parse_number(w)
        if lw in STOPWORDS or s in markers:
            f[3] = 1.0
        if s in markers:
            value = None
        elif value is not None:
            after = words[i + 1][2].lower() if i + 1 < len(words) else ""
            if strict and after in _SCALE_WORDS and lw not in _SCALE_WORDS:
                value *= _SCALE_WORDS[after]  # the claim is the product: checked against the context's values
            f[0] = float(not (index.has_number(value) or (strict and _no_claim(answer, s, e, value, after, index))
                              or (s in date_months and value in index.months)
                              or (value in steps and bool(_STEP_REFERENCE.search(answer[max(0, s - 40):s])))))
        elif strict and (day := _calendar_word(words, i, sentence_starts)) is not None:
            # a month or weekday is named even at a sentence's start ("May 5 is ..."), against the context's dates
            f[1] = f[2] = float(day not in (index.months if lw in _MONTHS else index.weekdays))
        elif strict and prev_number is not None and lw in _SELF_COUNT:
            f[3] = 1.0  # "108 words": about the answer's own text
        elif prev_number is not None and (lw in _UNITS or (strict and lw == "pm")):
            f[0] = float(prev_number)  # a unit belongs to its number's claim: "500 meters", "330 m"
        elif lw not in STOPWORDS:
            absent = not index.has_word(w)
            f[2] = float(absent)
            if w[:1].isupper() and s not in sentence_starts:  # sentence-initial capitals are not names
                f[1] = float(absent and not (strict and (_name_parts_present(w, index) or s in defined)))
            if index.falsy and _stem(lw) in index.falsy and not _negated(answer, s, sentence_starts):
                f[5] = 1.0
        if not scale_of_previous:  # "2.5 million dollars": the unit after the scale word is still the number's
            prev_number = bool(f[0]) if value is not None else None
        out.append((s, e, f))
    # sentence-level share of unsupported content words, and the sentence's place in the answer
    for n, m in enumerate(_SENT.finditer(answer)):
        inside = [f for s, e, f in out if m.start() <= s < m.end()]
        content = [f for f in inside if not f[3]]
        share = float(np.mean([max(f[0], f[2]) for f in content])) if content else 0.0
        for f in inside:
            f[4] = share
            if copy:
                f[10] = min(n, 3) / 3
    if copy:
        _copy_signals(answer, [w.lower() for _, _, w in words], out, index)
    return out


def _copy_signals(answer: str, lowered: list[str], out: list[tuple[int, int, np.ndarray]], index: ContextIndex
                  ) -> None:
    """copied_bigram, copied_4gram, pair_unsupported and answer_position of each word (columns 6-9)."""
    n = len(lowered)
    for i in range(n - 1):
        if (lowered[i], lowered[i + 1]) in index.bigrams:
            out[i][2][6] = out[i + 1][2][6] = 1.0
    for i in range(n - 3):
        if tuple(lowered[i:i + 4]) in index.fourgrams:
            for j in range(i, i + 4):
                out[j][2][7] = 1.0
    prev = None
    for (s, _, f), w in zip(out, lowered):
        f[9] = s / max(1, len(answer))
        if w in STOPWORDS:
            continue
        if prev is not None:
            f[8] = float((prev, w) not in index.content_pairs)
        prev = w


def _name_parts_present(word: str, index: ContextIndex) -> bool:
    """A hyphenated word whose capitalised parts the context has: "American-style" names "American" only."""
    parts = re.split(r"[-’']", word)
    names = [p for p in parts if p[:1].isupper()]
    return len(parts) > 1 and len(names) < len(parts) and all(index.has_word(p) for p in names)


_BRACKETED_ACRONYM = re.compile(r"\(([A-Z][A-Za-z&]{1,9})\)")  # "(APhA)", "(ISIS)" after the words it abbreviates
_NAME_RUN = re.compile(r"(?:[A-Z][\w’'-]*\s+(?:(?:of|and|for|the|in)\s+)?)+$")  # "Islamic State " before "(ISIS)"


def _known_acronym_expansions(answer: str, index: ContextIndex) -> set[int]:
    """Starts of the words an answer spells an acronym out with, when the context names that acronym: "Islamic
    State (ISIS)" against a context that says "ISIS" names what the context names. The words' initials must be
    the acronym's first capitals (at least two)."""
    out = set()
    for m in _BRACKETED_ACRONYM.finditer(answer):
        if m.group(1).lower() not in index.words:
            continue
        run = _NAME_RUN.search(answer[max(0, m.start() - 120):m.start()])
        if not run:
            continue
        offset = max(0, m.start() - 120) + run.start()
        names = [(offset + w.start(), w.group()) for w in re.finditer(r"[A-Z][\w’'-]*", run.group())]
        capitals = "".join(c for c in m.group(1) if c.isupper())
        for k in range(len(names), 1, -1):  # the last k words: "The Islamic State (ISIS)" drops "The"
            if capitals.startswith("".join(w[0] for _, w in names[-k:])):
                out.update(start for start, _ in names[-k:])
                break
    return out


def _defined_acronyms(answer: str) -> set[int]:
    """Starts of acronyms the answer defines itself, in brackets after their words ("American Pharmacists
    Association (APhA)"): the words are the claim, checked on their own."""
    out = set()
    for m in _BRACKETED_ACRONYM.finditer(answer):
        capitals = [c for c in m.group(1) if c.isupper()]
        before = re.findall(r"[A-Za-z][\w-]*", answer[max(0, m.start() - 120):m.start()])
        initials = [w[0] for w in before if w[:1].isupper()][-len(capitals):]
        if len(capitals) >= 2 and initials == capitals:
            out.add(m.start(1))
    return out


def _calendar_word(words: list[tuple[int, int, str]], i: int, sentence_starts: set[int]) -> int | None:
    """The month (1-12) or weekday (0-6) that answer word i names, if it surely names one: capitalised, and
    beside a number; else a month's full name inside a sentence ("May" and "March" only beside a number: "May I",
    "March on") or a weekday's full name."""
    s, _, w = words[i]
    lw = w.lower()
    if not w[:1].isupper() or (lw not in _MONTHS and lw not in _WEEKDAYS):
        return None
    beside_number = any(0 <= j < len(words) and words[j][2][:1].isdigit() for j in (i - 1, i + 1))
    if beside_number:
        return _MONTHS.get(lw, _WEEKDAYS.get(lw))
    if lw in _MONTH_NAMES:  # an abbreviation alone may be a word or a name ("Jan", "Sun", "Wed")
        return _MONTHS[lw] if lw not in ("may", "march") and s not in sentence_starts else None
    return _WEEKDAYS[lw] if lw in _WEEKDAY_NAMES else None


def _negated(answer: str, start: int, sentence_starts: set[int], window: int = 5) -> bool:
    """A negation among the `window` words before `start` in its clause ("does not offer outdoor seating")."""
    first = max((b for b in sentence_starts if b <= start), default=0)
    clause = _CLAUSE_BREAK.split(answer[first:start])[-1]  # "has no WiFi, but offers delivery": not negated
    before = clause.split()[-window:]
    return bool(_NEGATION.search(" ".join(before)))


# Answer token types (detector.json "answer_types"; training.detector `data.answer_types`). "plain": the answer
# segment is token type 1, as BERT's second segment. "grounding": type 2 marks a token of a content word the
# context lacks and type 3 one of a number, quantity or name it lacks (the word signals below, computed against
# the context the Detector's windows read), so the encoder itself reads the exact check's evidence in its
# context instead of only through the combiner after it (the grounding signals "fed to the model as features").
ANSWER_TYPES = ("plain", "grounding")
GROUNDING_TYPE_VOCAB = 4  # token types 0 (context, question), 1 (answer), 2 and 3 (above)


def answer_type_ids(grounding: np.ndarray) -> list[int]:
    """Per answer token, from its grounding features (token_features): 3 when its number / quantity / name is
    unsupported, else 2 when its content word is, else 1."""
    g = np.asarray(grounding)
    if not len(g):
        return []
    term = (g[:, 0] > 0) | (g[:, 1] > 0)
    word = g[:, 2] > 0
    return np.where(term, 3, np.where(word, 2, 1)).astype(int).tolist()


def grounding_features(answer: str, context: str, question: str | None,
                       answer_offsets: Sequence[tuple[int, int]], index: ContextIndex | None = None,
                       copy: bool = True) -> np.ndarray:
    """(n_tokens, len(FEATURES)) float32: each token takes the features of the word it overlaps (punctuation and
    whitespace tokens: function_word = 1). `copy=False`: the COPY_FEATURES stay 0 (a combiner without them)."""
    index = index or ContextIndex(f"{context}\n{question or ''}")
    return token_features(word_signals(answer, index, copy), answer_offsets)


def token_features(words: list[tuple[int, int, np.ndarray]], answer_offsets: Sequence[tuple[int, int]]
                   ) -> np.ndarray:
    """grounding_features from the answer's word_signals, for a caller that reads the words as well."""
    feats = np.zeros((len(answer_offsets), len(FEATURES)), dtype=np.float32)
    j = 0
    for i, (s, e) in enumerate(answer_offsets):
        while j < len(words) and words[j][1] <= s:
            j += 1
        k, hit = j, None
        while k < len(words) and words[k][0] < e:
            if hit is None or words[k][2][:3].max() > hit[:3].max():
                hit = words[k][2]
            k += 1
        if hit is None:
            feats[i, 3] = 1.0
        else:
            feats[i] = hit
    return feats


_UNIT_ALIASES = {"m": "meter", "metre": "meter", "km": "kilometer", "kilometre": "kilometer", "ft": "foot",
                 "feet": "foot", "inche": "inch", "cm": "centimeter", "mm": "millimeter", "kg": "kilogram",
                 "g": "gram", "lb": "pound", "ton": "tonne", "usd": "dollar"}


def _unit(word: str) -> str | None:
    """The canonical unit of a word after a number ("metres" -> meter), None if it is no unit."""
    w = word.lower()
    if w not in _UNITS:
        return None
    singular = w[:-1] if w.endswith("s") and len(w) > 3 else w  # "metres" -> metre, "meters" -> meter
    return _UNIT_ALIASES.get(w) or _UNIT_ALIASES.get(singular) or singular


def quantity_kinds(text: str) -> list[str]:
    """What each written number of `text` measures: `unit:<unit>` ("500 meters", "330 m"), `year` (a bare integer
    from 1000 to 2100) or `number`; the same for an ungrounded term and for a context sentence, so that a wrong
    number can be shown beside the context's statement of the same quantity."""
    words = [m.group() for m in _WORD.finditer(text)]
    kinds = []
    for i, w in enumerate(words):
        if not w[:1].isdigit():
            continue
        value = parse_number(w)
        if value is None:
            continue
        unit = _unit(words[i + 1]) if i + 1 < len(words) else None
        if unit:
            kinds.append(f"unit:{unit}")
        elif value.is_integer() and 1000 <= value <= 2100 and "," not in w:
            kinds.append("year")
        else:
            kinds.append("number")
    return kinds


def terms_within(terms: Sequence[dict], start: int, end: int) -> list[str]:
    """Texts of the `unsupported_spans` entries that overlap answer[start:end] (a flagged span's ungrounded terms)."""
    return [t["text"] for t in terms if t["start"] < end and start < t["end"]]


def unsupported_word_share(words: list[tuple[int, int, np.ndarray]]) -> float:
    """The share of the answer's content words (no stopword, no list marker) whose `word_unsupported` signal fires,
    from its `word_signals` (the loose rules: stems, plurals; the copy signals play no part): how much of what the
    answer says the context does not contain. Numbers count as content words but are judged by their own signal
    (and the exact check), not here. 0.0 for an answer without content words. Part of the example score
    (DetectorScores.score)."""
    flags = [f[2] for _, _, f in words if not f[3]]
    return float(np.mean(flags)) if flags else 0.0


def unsupported_spans(answer: str, context: str, question: str | None = None, words: bool = False,
                      strict: bool = True) -> list[dict]:
    """Answer words whose number or name signal fires (with `words`: any content word absent from the context),
    merged when adjacent, under the strict rules unless `strict=False` (ContextIndex): the terms a flagged span's
    explanation names, the spans flagged whatever the model says (DetectorSettings.flag_ungrounded), and the
    rule-only reference rows of the evaluation."""
    index = ContextIndex(f"{context}\n{question or ''}", strict=strict)
    spans: list[dict] = []
    for s, e, f in word_signals(answer, index, copy=False):
        if not (f[0] or f[1] or (words and f[2])):
            continue
        if spans and not re.search(r"\w", answer[spans[-1]["end"]:s]) and s - spans[-1]["end"] <= 2:
            spans[-1]["end"] = e
        else:
            spans.append({"start": s, "end": e})
    for sp in spans:
        sp["text"] = answer[sp["start"]:sp["end"]]
    return spans
