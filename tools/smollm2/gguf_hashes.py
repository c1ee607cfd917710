"""The gguf Python package's dequantisation of every tensor of a GGUF file, as a hash per tensor.

    python gguf_hashes.py MODEL.gguf > examples/engine/smollm2/gguf_tensors.tsv

Each line: name, ggml type, dims (innermost first, comma-separated), and a 64-bit hash of the
tensor's float32 values (file order) as gguf dequantises them: the values' bits as little-endian
64-bit words w_i (a zero word pads an odd count), h = sum_i (w_i ^ (w_i >> 29)) * (K + 2 i)
modulo 2^64 with K = 0x9E3779B97F4A7C15. Every multiplier is odd, so a change of any bit of one
value changes h. The C++ reader's test hashes its own dequantisation the same way.
Run with the evaluation environment of tools/smollm2/setup_env.sh (gguf pinned there).
"""
import sys

import gguf
import numpy as np


K = np.uint64(0x9E3779B97F4A7C15)


def value_hash(values: np.ndarray) -> int:
    bits = np.ascontiguousarray(values, dtype="<f4").view("<u4").astype(np.uint64)
    if bits.size % 2:
        bits = np.append(bits, np.uint64(0))
    words = bits[0::2] | (bits[1::2] << np.uint64(32))
    mixed = words ^ (words >> np.uint64(29))
    multipliers = K + np.uint64(2) * np.arange(words.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int(np.sum(mixed * multipliers, dtype=np.uint64))


def main() -> None:
    reader = gguf.GGUFReader(sys.argv[1])
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype("<f4", copy=False)
        dims = ",".join(str(int(d)) for d in t.shape)
        print(f"{t.name}\t{t.tensor_type.name}\t{dims}\t{value_hash(values.reshape(-1)):016x}")


if __name__ == "__main__":
    main()
