# Training and evaluation sequences of the razorkv tiny model: corpus text, and text with
# repeated segments (random byte runs, real passages, key/value lines asked again later).
import numpy as np


class Corpus:
    def __init__(self, path):
        self.data = np.fromfile(path, dtype=np.uint8)

    def window(self, rng, length):
        start = int(rng.integers(0, len(self.data) - length))
        return self.data[start:start + length].astype(np.int64)


def repeated_random(rng, length, corpus=None):
    """A random byte run repeated to fill `length` (with text between copies when corpus is set)."""
    run = rng.integers(0, 256, size=int(rng.integers(10, min(200, length // 2) + 1)))
    out = []
    while sum(len(p) for p in out) < length:
        out.append(run)
        if corpus is not None:
            out.append(corpus.window(rng, int(rng.integers(0, length // 4))))
    return np.concatenate(out)[:length]


def repeated_passage(rng, corpus, length):
    """Text with one passage of the corpus occurring twice, far apart."""
    passage = corpus.window(rng, int(rng.integers(20, max(21, length // 3))))
    gap = int(rng.integers(0, max(1, length - 2 * len(passage))))
    head = int(rng.integers(0, max(1, length - 2 * len(passage) - gap)))
    seq = np.concatenate([corpus.window(rng, head), passage, corpus.window(rng, gap), passage,
                          corpus.window(rng, length)])
    return seq[:length]


def key_value_line(key, value):
    return f"key {key:04d}: value {value:05d}\n".encode()


def key_value_lines(rng, corpus, length):
    """Filler text with key/value lines at random depths, asked again (answered) near the end."""
    count = int(rng.integers(1, 6))
    keys = rng.choice(10000, size=count, replace=False)
    values = rng.integers(0, 100000, size=count)
    lines = [np.frombuffer(key_value_line(int(k), int(v)), dtype=np.uint8).astype(np.int64)
             for k, v in zip(keys, values)]
    asked = [lines[i] for i in rng.permutation(count)]
    room = length - sum(len(x) for x in lines) - sum(len(x) for x in asked)
    if room < 16:
        return corpus.window(rng, length)
    cuts = np.sort(rng.integers(0, room, size=count + 1))
    pieces, previous = [], 0
    for line, cut in zip(lines, cuts[:count]):
        pieces += [corpus.window(rng, int(cut - previous)), line]
        previous = cut
    pieces.append(corpus.window(rng, int(cuts[count] - previous)))
    pieces += asked
    seq = np.concatenate(pieces + [corpus.window(rng, length)])
    return seq[:length]


def batch(rng, corpus, size, length, mix):
    """`size` sequences of length + 1 tokens; mix maps a kind to its probability."""
    kinds = list(mix)
    p = np.array([mix[k] for k in kinds], dtype=np.float64)
    p /= p.sum()
    out = np.empty((size, length + 1), dtype=np.int64)
    for i in range(size):
        kind = kinds[int(rng.choice(len(kinds), p=p))]
        if kind == "text":
            out[i] = corpus.window(rng, length + 1)
        elif kind == "random_repeat":
            out[i] = repeated_random(rng, length + 1)
        elif kind == "random_repeat_in_text":
            out[i] = repeated_random(rng, length + 1, corpus)
        elif kind == "passage_repeat":
            out[i] = repeated_passage(rng, corpus, length + 1)
        elif kind == "key_value":
            out[i] = key_value_lines(rng, corpus, length + 1)
        else:
            raise ValueError(f"unknown sequence kind {kind}")
    return out
