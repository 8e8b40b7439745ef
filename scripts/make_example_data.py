"""Writes the example data the README and docs/ use:

- examples/transcripts/{train,test}.csv: synthetic show transcripts rated general / teen /
  mature. Each is neutral talk with one short passage, placed anywhere, that carries the
  rating, so a reader of the first chunk alone cannot rate most of them (seed 11).
- examples/descriptors/{train,test}.csv: multi-label: transcripts that carry any of the content
  descriptors violence, language and drugs (a `labels` column joined by `;`, empty for none),
  each descriptor by a passage of its own placed anywhere (seed 12).

Deterministic; run from the repository root:

    python3 scripts/make_example_data.py
"""

import csv
import random
from pathlib import Path

SPEAKERS = ["ANNA", "BEN", "CARLA", "DEV", "ELLIS", "FAYE", "GUS", "HANA"]
NEUTRAL = [
    "Did you remember to bring the {thing} from the {place}?",
    "I think the {thing} is still on the table by the {place}.",
    "We should leave before the traffic near the {place} gets worse.",
    "My sister called and asked about the {thing} again.",
    "The weather was lovely this morning down at the {place}.",
    "Can you pass me the {thing}? Thanks, that is the one.",
    "I read somewhere that the {place} opens late on Sundays.",
    "Let us meet at the {place} after lunch and sort it out.",
    "He finally fixed the {thing}, so we can use it again.",
    "Nobody told me the {place} was closed for repairs.",
    "I will write the list tonight and pick up the {thing} tomorrow.",
    "The bus to the {place} was ten minutes late again.",
]
THINGS = ["umbrella", "map", "ladder", "kettle", "bicycle", "camera", "notebook", "lamp", "radio", "blanket"]
PLACES = ["market", "library", "harbour", "station", "bakery", "garden", "museum", "school", "park", "bridge"]
PASSAGES = {
    "general": [
        "The children clapped when the puppet show began at the {place}.",
        "Grandma baked a cake and everyone sang happy birthday together.",
        "The little dog learned a new trick and the whole class cheered.",
    ],
    "teen": [
        "He slammed the door and yelled that the whole {place} was a stupid dump.",
        "They shoved each other in the hallway until a teacher pulled them apart.",
        "She snuck out past curfew and lied to her parents about the party.",
    ],
    "mature": [
        "The gang beat the witness bloody behind the {place} and left him for dead.",
        "He pulled a gun, fired twice, and the body dropped onto the wet pavement.",
        "They snorted the drugs in the car and cursed every cop in the {place}.",
    ],
}


def line(rng: random.Random, template: str) -> str:
    text = template.format(thing=rng.choice(THINGS), place=rng.choice(PLACES))
    return f"{rng.choice(SPEAKERS)}: {text}"


def transcript(rng: random.Random, label: str) -> str:
    lines = [line(rng, rng.choice(NEUTRAL)) for _ in range(rng.randint(28, 60))]
    passage = [line(rng, template) for template in rng.sample(PASSAGES[label], 3)]
    at = rng.randint(0, len(lines))
    return "\n".join(lines[:at] + passage + lines[at:])


def write(path: Path, rng: random.Random, per_label: int, prefix: str) -> None:
    rows = []
    for label in PASSAGES:
        rows += [(label, transcript(rng, label)) for _ in range(per_label)]
    rng.shuffle(rows)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "label"])
        for i, (label, text) in enumerate(rows):
            writer.writerow([f"{prefix}-{i:03d}", text, label])


DESCRIPTORS = {
    "violence": [
        "The gang beat the witness bloody behind the {place} and left him for dead.",
        "He pulled a knife and stabbed the guard twice outside the {place}.",
        "They kicked him until he stopped moving on the floor of the {place}.",
    ],
    "language": [
        "Shut your damn mouth, you stupid bastard, and get out of my {place}.",
        "What the hell is this crap? Who the hell left it by the {place}?",
        "Damn it, the bloody {thing} is broken again, this is total crap.",
    ],
    "drugs": [
        "They snorted cocaine in the car before driving to the {place}.",
        "He sold pills and weed to the kids behind the {place} every night.",
        "She was high on heroin again and could not find the {thing}.",
    ],
}


def described(rng: random.Random, descriptors: list) -> str:
    lines = [line(rng, rng.choice(NEUTRAL)) for _ in range(rng.randint(28, 60))]
    for descriptor in descriptors:
        passage = [line(rng, template) for template in rng.sample(DESCRIPTORS[descriptor], 2)]
        at = rng.randint(0, len(lines))
        lines = lines[:at] + passage + lines[at:]
    return "\n".join(lines)


def write_descriptors(path: Path, rng: random.Random, documents: int, prefix: str) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "labels"])
        for i in range(documents):
            carried = [d for d in DESCRIPTORS if rng.random() < 0.4]
            writer.writerow([f"{prefix}-{i:03d}", described(rng, carried), ";".join(carried)])


def main() -> None:
    rng = random.Random(11)
    out = Path("examples/transcripts")
    out.mkdir(parents=True, exist_ok=True)
    write(out / "train.csv", rng, 20, "train")
    write(out / "test.csv", rng, 10, "test")
    rng = random.Random(12)
    out = Path("examples/descriptors")
    out.mkdir(parents=True, exist_ok=True)
    write_descriptors(out / "train.csv", rng, 80, "train")
    write_descriptors(out / "test.csv", rng, 40, "test")


if __name__ == "__main__":
    main()
