#!/usr/bin/env python3
# Builds the training corpus of the razorkv tiny model offline from files that Debian packages
# ship (Python's standard library, Eigen and libstdc++ headers), with a fixed split and checksum.
import argparse
import hashlib
import os
import subprocess
import sys

# (package, file suffixes) of a fixed list; source code is full of repeated identifiers, which grows induction heads.
PACKAGES = [
    ("libpython3.11-stdlib", (".py",)),
    ("libeigen3-dev", ("",)),
    ("libstdc++-12-dev", ("",)),
]
HELDOUT_EVERY = 20  # a file whose path hash is 0 modulo this is held out of training


def package_files(package, suffixes):
    try:
        listing = subprocess.run(["dpkg", "-L", package], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        sys.exit(f"corpus: Debian package {package} is not installed (apt-get install {package})")
    files = []
    for path in listing.split("\n"):
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        if "/test" in path or "/doc/" in path:
            continue
        if any(path.endswith(s) for s in suffixes):  # "" accepts every file of the package
            files.append(path)
    return sorted(files)


def is_text(data):
    return b"\0" not in data and len(data) > 0


def heldout(path):
    return int(hashlib.sha256(path.encode()).hexdigest(), 16) % HELDOUT_EVERY == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="folder for train.bin and heldout.bin")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    parts = {"train": [], "heldout": []}
    for package, suffixes in PACKAGES:
        for path in package_files(package, suffixes):
            with open(path, "rb") as f:
                data = f.read()
            if is_text(data):
                parts["heldout" if heldout(path) else "train"].append(data)
    for name, blobs in parts.items():
        data = b"\n\n".join(blobs)
        with open(os.path.join(args.out, name + ".bin"), "wb") as f:
            f.write(data)
        print(f"corpus: {name}: {len(blobs)} files, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main()
