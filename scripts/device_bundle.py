"""The wheels ``scripts/device_check.py`` needs beyond a bare GPU image, fetched once where PyPI is reachable.

    python scripts/device_bundle.py                          # -> .device/wheels, for CPython 3.12 on x86_64
    python scripts/device_bundle.py --python-version 3.11 --out /tmp/wheels

The lent GPU machine's image has python3 with torch, transformers, peft and accelerate and about 200 other
packages (``IMAGE`` below: pandas, pyarrow, requests, fsspec, xxhash, ...), but no network, and a run carries at
most 64 MiB with the checkout. Step 3 of the device check (one TRL GRPO update and one crossed evaluation batch
of the tiny model) also needs TRL, datasets, hydra-core, omegaconf, Math-Verify and pebble: this script downloads
those wheels and the requirements of theirs the image lacks (``--no-deps``: the list below is the closure over
``IMAGE``, checked by the suite from the installed packages' metadata), builds the one that PyPI ships only as a
source archive (antlr4-python3-runtime 4.9.3, pure Python), and refuses a bundle that would not fit beside the
checkout. ``--add REQ`` carries another wheel, for a requirement the image meets with the wrong version (the
device check names each one it finds).

Not carried: Ray (its cp312 wheel is 75.6 MiB, over the whole limit), so the check cannot start Ray with
``num_gpus=1`` on that machine; the suite's rehearsals start it with logical GPUs on the CPU instead.

The versions are the GPU lock's (``locks/gpu-py312.txt``) except datasets 4.8.0 instead of 5.2.0 (5.x asks for
pyarrow>=24, 4.8 for >=21: more images meet it). ``device_check.py --wheels DIR`` installs the folder into a
throw-away venv that sees the image's packages.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 64.0  # what a device run carries: the checkout and the ignored paths named in carry, together
# the packages of the lent GPU machine's image, as the device tool's notes list them (one name a line)
IMAGE = frozenset(line.strip() for line in (ROOT / "scripts" / "device_image_packages.txt").read_text().splitlines()
                  if line.strip() and not line.startswith("#"))
BUNDLE = [  # (requirement, why) -- what step 3 needs that IMAGE lacks
    ("trl==1.16.0", "GRPOTrainer"),
    ("datasets==4.8.0", "TRL's training dataset"),
    ("dill==0.4.1", "datasets' fingerprints"),
    ("multiprocess==0.70.19", "datasets"),
    ("hydra-core==1.3.8", "the project's configs"),
    ("omegaconf==2.3.1", "hydra-core"),
    ("math-verify==0.9.0", "the reader panel"),
    ("latex2sympy2_extended==1.11.0", "Math-Verify"),
    ("pebble==5.2.3", "scoring and the symbolic reward's worker processes"),
]
SOURCE_ONLY = [("antlr4-python3-runtime==4.9.3", "omegaconf and Math-Verify's LaTeX parser (sdist only on PyPI)")]


def checkout_mib() -> float:
    """The tracked files as a device run carries them (git archive of HEAD)."""
    out = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    return len(out) / 2**20


def download(out: Path, python_version: str, extra: list[str] = ()) -> list[Path]:
    """Binary or pure-Python wheels for manylinux x86_64 and ``python_version``, without their dependencies."""
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--implementation", "cp",
           "--python-version", python_version, "--platform", "manylinux_2_28_x86_64", "--platform",
           "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "--platform", "any", "-d", str(out)]
    subprocess.run([*pip, *[r for r, _ in BUNDLE], *extra], check=True)
    with tempfile.TemporaryDirectory() as tmp:  # an sdist: fetched, then built here into a pure-Python wheel
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:", "-d", tmp,
                        *[r for r, _ in SOURCE_ONLY]], check=True)
        for sdist in Path(tmp).iterdir():
            subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(sdist)], check=True)
    return sorted(out.glob("*.whl"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / ".device" / "wheels"), help="folder for the wheels")
    parser.add_argument("--python-version", default="3.12", help="the image's CPython (default 3.12)")
    parser.add_argument("--add", nargs="*", default=[], metavar="REQ",
                        help="more wheels, e.g. fsspec==2026.2.0 where the image's version does not meet a requirement")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(f"device_bundle: {out} is not empty; remove it or choose another --out", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    wheels = download(out, args.python_version, args.add)
    sizes = {w.name: w.stat().st_size for w in wheels}
    total = sum(sizes.values()) / 2**20
    carried = total + checkout_mib()
    manifest = {"python_version": args.python_version, "wheels": sizes, "bundle_mib": round(total, 1),
                "with_checkout_mib": round(carried, 1), "limit_mib": LIMIT_MIB,
                "why": {**dict(BUNDLE + SOURCE_ONLY), **dict.fromkeys(args.add, "--add")}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for name, size in sorted(sizes.items(), key=lambda kv: -kv[1]):
        print(f"{size / 2**20:7.2f} MiB  {name}")
    print(f"{total:7.2f} MiB  in {len(wheels)} wheels; with the checkout {carried:.1f} of {LIMIT_MIB:.0f} MiB")
    if carried > LIMIT_MIB:
        print(f"device_bundle: {carried:.1f} MiB would not travel (limit {LIMIT_MIB:.0f} MiB)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
