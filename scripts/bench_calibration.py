"""Simultaneous finite-population bounds (paper 001 App. A): coverage of the truth over simulated frozen
samples of a synthetic population, and the time it takes.

    python scripts/bench_calibration.py [draws]
"""

from __future__ import annotations

import sys

from crossed_rlvr.calibration.simulate import coverage_simulation

if __name__ == "__main__":
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    for seed in (0, 1, 2):
        r = coverage_simulation(draws, seed)
        print(f"seed {seed}: {draws} frozen samples, coverage initial {r['initial']:.3f} trained {r['trained']:.3f} "
              f"gain {r['gain']:.3f} all together {r['all']:.3f}; {r['seconds']:.2f} s")
