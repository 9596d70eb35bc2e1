"""Word lists and sentence templates of the embedded knowledge world (:mod:`searchenv.data.world.generator`).

Kept apart from the generator so that the generator reads as logic and this module as data. Names are
built from the syllable parts below, so no language model has seen them; everything else is ordinary
English vocabulary that only dresses the invented facts. Templates use :meth:`str.format_map` slots; the
slots each entity kind provides are listed with its templates.
"""

from __future__ import annotations

# --- syllables for invented names -------------------------------------------------------------------------

# A name is a "closed" syllable (onset + vowel + coda), then "open" ones (one consonant + one vowel), then
# an ending: Brevondt = bre + vo + ndt. Open syllables keep names short and pronounceable.
ONSETS = (
    "b",
    "br",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "k",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "pr",
    "qu",
    "r",
    "s",
    "sk",
    "st",
    "t",
    "th",
    "tr",
    "v",
    "vr",
    "w",
    "z",
)
VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ae", "ei")
CODAS = ("", "", "", "", "n", "r", "l", "s", "m", "th", "nd", "rn", "st")
OPEN_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z")
OPEN_VOWELS = ("a", "e", "i", "o", "u")
VOWEL_LETTERS = "aeiou"

# Endings give each kind of name its own look; they start with a consonant so that they never run into the
# vowel of the open syllable before them.
FEMININE_ENDINGS = ("la", "na", "ra", "lle", "nne", "wyn", "ris", "tte", "da", "sa")
MASCULINE_ENDINGS = ("ric", "dor", "ren", "mund", "las", "bert", "win", "mar", "gar", "vin")
SURNAME_ENDINGS = ("ndt", "s", "ber", "low", "wick", "ley", "ham", "mann", "sen", "ton", "rk")
CITY_ENDINGS = ("la", "ssa", "heim", "ford", "ra", "vith", "dum", "rade", "wick", "borg", "stad")
REGION_ENDINGS = ("mark", "land", "via", "nia", "vesk", "mere", "ria")
STEM_ENDINGS = ("va", "lo", "rene", "mora", "lis", "dar", "mel")
RIVER_ENDINGS = ("ne", "la", "rin", "sey", "dau")
WORD_ENDINGS = ("", "la", "mel", "rin", "det", "th", "vo", "ke", "nor", "wen")

# --- kinds and dressing -----------------------------------------------------------------------------------

# (name suffix, what the organisation is)
ORG_KINDS = (
    ("Guild", "craft guild"),
    ("Society", "learned society"),
    ("Academy", "academy of fine arts"),
    ("Company", "trading company"),
    ("Observatory", "observatory"),
    ("Press", "printing house"),
    ("Conservatory", "school of music"),
    ("Bank", "private bank"),
    ("Shipyard", "shipyard"),
    ("Museum", "museum"),
    ("Library", "subscription library"),
    ("Collegium", "teaching college"),
    ("Foundry", "bell foundry"),
    ("Brotherhood", "mutual-aid brotherhood"),
    ("Circle", "literary circle"),
    ("Institute", "research institute"),
)
SETTLEMENTS = ("town", "city", "port city", "market town", "river town", "hill town", "fortress town")
REGION_KINDS = ("province", "duchy", "canton", "county", "march", "island province", "free state")
OCCUPATIONS = (
    "cartographer",
    "glassblower",
    "astronomer",
    "botanist",
    "composer",
    "shipwright",
    "mathematician",
    "painter",
    "clockmaker",
    "physician",
    "poet",
    "architect",
    "linguist",
    "engraver",
    "chemist",
    "navigator",
    "historian",
    "sculptor",
    "jurist",
    "printer",
)
GENRES = (
    "novel",
    "epic poem",
    "treatise",
    "atlas",
    "chronicle",
    "song cycle",
    "play",
    "herbal",
    "star catalogue",
    "travelogue",
    "book of essays",
)
TITLE_NOUNS = (
    "Lanterns",
    "Orchard",
    "Tides",
    "Bells",
    "Mirror",
    "Salt",
    "Winter",
    "Ferryman",
    "Compass",
    "Ashes",
    "Harbour",
    "Loom",
    "Garden",
    "Lighthouse",
    "Falcon",
    "Ledger",
    "Glassmaker",
    "Weir",
    "Signal",
    "Threshold",
)
# Each pattern holds {word}, a pool word unique to the work, so titles are unique; the fixed parts differ
# between patterns so two patterns never produce the same title.
TITLE_PATTERNS = (
    "The {noun} of {word}",
    "{word}",
    "{word} and the {noun}",
    "Beyond {word}",
    "Letters from {word}",
)

TOPICS = (
    "tidal charts",
    "optics",
    "botany",
    "harmony",
    "navigation",
    "mineralogy",
    "perspective",
    "glassmaking",
    "astronomy",
    "cartography",
    "metallurgy",
    "grammar",
    "hydraulics",
    "heraldry",
    "anatomy",
    "weaving",
    "bell-founding",
    "calendars",
    "weights and measures",
    "bookbinding",
)
PRODUCTS = (
    "woollen cloth",
    "salted fish",
    "amber",
    "wine",
    "cheese",
    "glassware",
    "timber",
    "honey",
    "lace",
    "copper",
    "rope",
    "apples",
    "paper",
    "slate",
    "barley",
)
NOUNS = (
    "lantern",
    "heron",
    "bell",
    "tower",
    "ship",
    "key",
    "wheel",
    "stag",
    "anchor",
    "crown",
    "lion",
    "star",
    "swan",
    "falcon",
    "mill",
    "gate",
    "ring",
    "boar",
)
COLOURS = ("grey", "silver", "golden", "crimson", "pale", "dark", "green", "white", "black", "blue", "amber")
TRAITS = ("gentle", "stern", "restless", "patient", "witty", "reserved", "generous", "quarrelsome", "shy")

# Words that pool names must never equal, so an entity name never reads as ordinary vocabulary.
RESERVED_WORDS = frozenset(
    w.lower() for group in (TITLE_NOUNS, NOUNS, COLOURS, TRAITS, OCCUPATIONS, SETTLEMENTS, REGION_KINDS) for w in group
) | frozenset(k.lower() for k, _ in ORG_KINDS)


def with_article(phrase: str) -> str:
    """``phrase`` with "a" or "an" in front, chosen by its first letter (enough for this vocabulary)."""
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


# --- passage templates ------------------------------------------------------------------------------------
# Every passage = one lead sentence + the fact sentences of its entity + filler sentences until ~100 words.
# Fact templates must contain the fact's value slot; filler templates must not state any relation the
# questions ask about (birthplace, teacher, employer, founder, seat, region, capital, governor, author, years
# of those), or the world would contradict itself.

# Slots named a_* hold the word with its indefinite article ("an astronomer"); see with_article(). Every kind
# also has colour, a_colour, noun, a_noun, noun2, a_noun2, topic, product and num (2-9).
# Person slots: name, Pron/pron (She/she), Poss/poss (Her/her), obj (her/him), occ, a_occ, by, dy, bp,
# teacher, employer, ey, org_f, fy, work, wy, gov_region, gy, city2, city3, city4, person2, org2, trait, and
# years year2 (age 18–30), year3 (31–44), year4 (after death), year5 (45 to death).
PERSON_LEAD = (
    "{name} ({by}–{dy}) was {a_occ} born in {bp}.",
    "{name} was {a_occ} who was born in {bp} in {by} and died in {dy}.",
    "Born in {bp} in {by}, {name} was {a_occ} who died in {dy}.",
    "{name} (born {by} in {bp}; died {dy}) was {a_occ} remembered for {poss} work on {topic}.",
    "{name} was {a_occ}, born in {by} in the city of {bp}.",
)
PERSON_TEACHER = (
    "{Pron} trained under {teacher}.",
    "As a young {occ}, {pron} was a pupil of {teacher}.",
    "{Poss} teacher was {teacher}, whose workshop {pron} entered at sixteen.",
    "{Pron} studied for several years with {teacher}.",
)
PERSON_EMPLOYER = (
    "In {ey} {pron} joined {employer}, where {pron} remained for most of {poss} career.",
    "{Pron} worked for {employer} from {ey}.",
    "From {ey} {pron} was employed by {employer}.",
)
PERSON_FOUNDED = (
    "In {fy} {pron} founded {org_f}.",
    "{Pron} is best known as the founder of {org_f}, established in {fy}.",
)
PERSON_WROTE = (
    "{Pron} wrote {work}, first published in {wy}.",
    "{Poss} best-known book is {work} ({wy}).",
)
PERSON_GOVERNED = (
    "{Pron} became the first governor of {gov_region} in {gy}.",
    "In {gy} {pron} was appointed the first governor of {gov_region}.",
)
PERSON_FILLER = (
    "{Pron} spent several winters in {city2} and wrote often about its harbour.",
    "A long correspondence with {person2} survives in the archive of {org2}.",
    "In {year2} {pron} travelled to {city3} to study {topic}.",
    "Contemporaries described {poss} manner as {trait} but exacting.",
    "{Poss} notebooks, filled with sketches of {noun}s, were rediscovered in {year4}.",
    "A street in {city2} was later named in {poss} honour.",
    "{Pron} was admired by {person2}, who called {obj} the most careful {occ} of the age.",
    "Late in life {pron} settled near {city3}, where {pron} kept a small garden.",
    "{Poss} lectures on {topic} drew students from as far as {city4}.",
    "Several of {poss} instruments are now held by {org2}.",
    "Historians still debate the date of {poss} first visit to {city3}.",
    "{Pron} married in {year3} and had {num} children.",
    "A portrait of {obj} in {colour} robes, painted around {year5}, hangs in {city2}.",
    "{Poss} methods influenced a generation of students of {topic}.",
    "In {year5} {pron} declined an invitation from {org2}.",
    "Little is known of {poss} early years apart from a brief stay in {city2}.",
    "{Pron} kept a diary of the weather that runs to {num} volumes.",
)

# Organisation slots: name, kind_l (guild), a_desc, fy, founder, seat, city2, person2, org2, and years
# year2 (3–60 years after foundation), year3 (61–140), year4 (141–220).
ORG_LEAD = (
    "{name} is {a_desc} established in {fy}.",
    "{name} is {a_desc} that was founded in {fy}.",
    "Founded in {fy}, {name} is {a_desc}.",
    "{name} has been {a_desc} since its foundation in {fy}.",
)
ORG_FOUNDER = (
    "It was founded by {founder}.",
    "Its founder was {founder}, who drew up its first charter.",
    "{founder} set it up together with a handful of colleagues.",
)
ORG_SEAT = (
    "The {kind_l} is based in {seat}.",
    "Its headquarters are in {seat}.",
    "It has its seat in {seat}, in a hall near the old market.",
)
ORG_FILLER = (
    "By {year3} it counted about {num}00 members.",
    "The {kind_l} kept close ties with {org2}.",
    "Its archive holds letters from {person2}.",
    "A branch office opened in {city2} in {year4}.",
    "Membership was long restricted to practitioners of {topic}.",
    "The {kind_l} publishes a yearly report on {topic}.",
    "Its emblem shows {a_colour} {noun} on a blue field.",
    "During a dispute in {year2}, {person2} resigned from its council.",
    "The hall it first occupied was later destroyed by fire.",
    "Its statutes have been revised several times after long debates.",
    "Visitors from {city2} are admitted on the first day of each month.",
    "A rival body, {org2}, was formed partly by former members.",
    "It awards a prize for work on {topic} every {num} years.",
    "The {kind_l} maintains a small collection of {noun2}s.",
    "Among its early patrons was {person2}.",
    "Minutes of its early meetings survive in good order.",
)

# City slots: name, settle, region, capital_of (the region it is the capital of, if any), fy, river, city2,
# city3, person2, org2, and years year2 (40–150 years after foundation), year3 (151–300), year4 (301–450),
# year5 (60–400).
CITY_LEAD = (
    "{name} is a {settle} in {region}, founded in {fy}.",
    "{name} is a {settle} in the region of {region}. It was founded in {fy}.",
    "Founded in {fy}, {name} is a {settle} in {region}.",
    "{name} is a {settle} of {region} whose charter dates from {fy}.",
)
CITY_CAPITAL = (
    "{name} is the capital of {capital_of}.",
    "It serves as the capital of {capital_of}.",
)
CITY_FILLER = (
    "{name} lies on the river {river}.",
    "Its market is known for {product}.",
    "{name} is twinned with {city2}.",
    "A bridge over the {river} was completed in {year2}.",
    "The town hall of {name} dates from {year3}.",
    "{person2} lived in {name} for several years.",
    "Its population grew quickly once a road to {city2} was built.",
    "The old quarter keeps {a_colour} {noun} in its main square.",
    "A branch of {org2} meets in the town every spring.",
    "Local festivals celebrate the harvest of {product}.",
    "The surrounding hills are known for their {colour} stone.",
    "Travellers from {city3} describe its streets as narrow and steep.",
    "{name} suffered a severe flood in {year4}.",
    "Its main church holds {num} bells cast in {year5}.",
    "The coat of arms shows {a_noun2} above running water.",
    "Around {num} thousand people live there today.",
)

# Region slots: name, rkind, a_rkind, capital, gov, gy, region2, region3, river, and years year2, year3,
# year4 (all between 1550 and 1900).
REGION_LEAD = (
    "{name} is {a_rkind} whose capital is {capital}.",
    "{name} is {a_rkind}; its capital and largest town is {capital}.",
    "The {rkind} of {name} is governed from its capital, {capital}.",
)
REGION_GOVERNOR = (
    "Its first governor was {gov}, who took office in {gy}.",
    "{gov} became its first governor in {gy}.",
)
REGION_FILLER = (
    "It borders {region2} to the north.",
    "The {rkind} is known for {product} and {colour} stone.",
    "Its highest point is a ridge above the valley of the {river}.",
    "The river {river} crosses {name} from east to west.",
    "Its dialect differs noticeably from that of {region3}.",
    "Roads to {region2} were improved in {year2}.",
    "Much of the land is given over to {product}.",
    "The {rkind} adopted its present borders in {year3}.",
    "Its flag shows {a_noun} on {a_colour} field.",
    "Winters in {name} are long and the mountain passes often close.",
    "A regional assembly meets twice a year in the old hall.",
    "Pilgrims cross it on the way to {region3}.",
    "Old maps mark it as a land of {noun2}s and mills.",
    "A survey of {year4} counted {num} hundred farms.",
)

# Work slots: name, genre, a_genre, author, wy, city2, person2, org2, work2, and years year2 (2–30 years
# after publication), year3 (31–80), year4 (1–10).
WORK_LEAD = (
    "{name} is {a_genre} by {author}, first published in {wy}.",
    "{name} is {a_genre} written by {author} and published in {wy}.",
    "Published in {wy}, {name} is {a_genre} by {author}.",
    "{author} wrote the {genre} {name}, which first appeared in {wy}.",
)
WORK_FILLER = (
    "Much of it is set in {city2}.",
    "It was translated into {num} languages.",
    "Critics compared it to {work2}.",
    "A revised edition appeared in {year2}.",
    "The manuscript is kept by {org2}.",
    "{person2} wrote a long and admiring review of it.",
    "Its opening pages describe {a_colour} {noun} at dawn.",
    "It was long used as a textbook on {topic}.",
    "The first printing ran to {num}00 copies.",
    "A stage adaptation opened in {city2} in {year3}.",
    "Several chapters deal with {topic}.",
    "It was briefly banned in {year4} for its remarks on {topic}.",
    "Readers in {city2} received it with enthusiasm.",
    "It is dedicated to {person2}.",
    "Its engraved frontispiece shows {a_noun2}.",
)

# --- question templates -----------------------------------------------------------------------------------
# NOUN_PHRASES turn an entity-valued relation into a phrase naming its object ("the founder of {x}"), so
# hops nest; QUESTIONS ask for the object of the final relation.
NOUN_PHRASES = {
    "birthplace": ("the birthplace of {x}", "the city where {x} was born"),
    "employer": ("the employer of {x}", "the organisation {x} worked for"),
    "teacher": ("the teacher of {x}", "the person who taught {x}"),
    "founder": ("the founder of {x}", "the person who founded {x}"),
    "seat": ("the seat of {x}", "the city where {x} is based"),
    "region": ("the region of {x}", "the region that contains {x}"),
    "capital": ("the capital of {x}",),
    "governor": ("the first governor of {x}",),
    "author": ("the author of {x}", "the writer of {x}"),
}
QUESTIONS = {
    "birthplace": ("Where was {x} born?", "In which city was {x} born?", "What is the birthplace of {x}?"),
    "birth_year": ("In what year was {x} born?", "When was {x} born?"),
    "employer": ("Which organisation employed {x}?", "For which organisation did {x} work?"),
    "teacher": ("Who taught {x}?", "Who was the teacher of {x}?"),
    "founder": ("Who founded {x}?", "Who was the founder of {x}?"),
    "seat": ("In which city is {x} based?", "Where is {x} headquartered?"),
    "founded": ("In what year was {x} founded?", "When was {x} established?"),
    "region": ("In which region is {x}?", "Which region contains {x}?"),
    "city_founded": ("In what year was {x} founded?", "When was {x} founded?"),
    "capital": ("What is the capital of {x}?", "Which city is the capital of {x}?"),
    "governor": ("Who was the first governor of {x}?",),
    "author": ("Who wrote {x}?", "Who is the author of {x}?"),
    "published": ("In what year was {x} published?", "When was {x} first published?"),
}
