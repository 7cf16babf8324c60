"""The gold canary pairs: 40 pairs where any sane judge prefers one side, in four kinds of difference.

Each of ten hand-written items (written for this project; docs/judge.md, "Reliability") is a text, a continuation
that follows on naturally, a version of that continuation with grammatical errors, and a fluent continuation about
something else. Every item gives four gold pairs, the good continuation against:

* ``shuffled``: its own words in a shuffled order (coherent vs shuffled words; a fixed seed per item);
* ``off_topic``: the fluent continuation about something else (on-topic vs off-topic);
* ``corrupted``: the hand-written ungrammatical version (grammatical vs corrupted);
* ``repetitive``: its first three words repeated to the same length (varied vs stuck repetition, the failure of
  small language models that sampling at low temperature shows most).

The set is deterministic, so its replies can be compared across sessions (drift), and large enough that the
Wilson interval of a judge's agreement can exclude chance (0.5): with 40 pairs, 27 agreements already do.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = ("shuffled", "off_topic", "corrupted", "repetitive")


@dataclass(frozen=True)
class Canary:
    """A gold pair: ``good`` is the better continuation of ``prefix``; ``kind`` says how ``bad`` is worse."""

    id: str
    kind: str
    prefix: str
    good: str
    bad: str


# (prefix, good continuation, ungrammatical version, fluent but off-topic continuation)
_ITEMS: tuple[tuple[str, str, str, str], ...] = (
    ("The river rose all night, and by morning", "the water had reached the doors of the old mill.",
     "the water have reach the door of old mill the.", "the price of stamps had gone up again."),
    ("When the bell rang at noon, the children", "ran out into the yard to play in the sun.",
     "runned out in the yard for plays in a sun.", "sold their old car to a dealer in town."),
    ("He folded the map, put it in his pocket, and", "set off down the road toward the village.",
     "setting off down road the toward village a.", "wrote a letter to the bank about his taxes."),
    ("The new bridge was finished in the spring, and", "people crossed it on foot for the first time.",
     "peoples crosses it on foots for a first times.", "the recipe needs two cups of flour."),
    ("Our neighbours keep bees, so every summer", "we get a jar of honey from them.",
     "we gets an jar of honeys from they.", "the court rules on the new tax law."),
    ("The doctor listened to his chest and said", "that he should rest at home for a few days.",
     "that he should resting at home for a few day.", "that the football match starts at eight."),
    ("After the storm had passed, the farmers", "went out to see how much of the wheat was lost.",
     "goes out to seen how many of the wheat were lose.", "voted on the design of the new stamp."),
    ("The library closes early on Fridays, so", "we returned our books on Thursday evening.",
     "we return ours book on Thursday evenings at.", "the moon has no air and no water."),
    ("She tuned the old piano before the concert, and", "every note sounded clear in the quiet hall.",
     "every notes sound clearly in the quiet halls a.", "the dog dug a hole under the fence."),
    ("The train was delayed by snow, so the passengers", "waited in the station and drank hot tea.",
     "waits in station the and drinked hot teas.", "painted the kitchen a pale shade of green."),
)


def _shuffled(text: str, seed: str) -> str:
    words = text.split()
    rng = random.Random(seed)
    order = list(words)
    while order == words:
        rng.shuffle(order)
    return " ".join(order)


def _repetitive(text: str) -> str:
    words = text.rstrip(".").split()
    head = words[:3]
    return " ".join(head[i % len(head)] for i in range(len(words)))


def _build() -> tuple[Canary, ...]:
    out = []
    for i, (prefix, good, corrupted, off_topic) in enumerate(_ITEMS, 1):
        bad = {
            "shuffled": _shuffled(good, f"canary-{i}"),
            "off_topic": off_topic,
            "corrupted": corrupted,
            "repetitive": _repetitive(good),
        }
        out += [Canary(f"{kind}-{i:02d}", kind, prefix, good, bad[kind]) for kind in KINDS]
    return tuple(out)


CANARIES: tuple[Canary, ...] = _build()
