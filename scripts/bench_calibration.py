"""Simultaneous finite-population bounds (paper 001 App. A): coverage of the truth over simulated frozen
samples of a synthetic population, and the time it takes.

    python scripts/bench_calibration.py [draws]
"""

from __future__ import annotations

from crossed_rlvr.calibration.simulate import (
    ANALYSIS_QUANTITIES,
    analysis_coverage,
    coverage_simulation,
    wald_interval,
)

if __name__ == "__main__":
    from crossed_rlvr.limits import Parser

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("draws", nargs="?", type=int, default=1000, help="simulated frozen samples (default 1000)")
    draws = parser.parse_args().draws
    if draws < 1:
        parser.error(f"draws={draws}: give at least 1")
    methods = {"exact, corrected (ours)": {}, "mutation: no multiplicity correction": {"corrected": False},
               "mutation: Wald intervals": {"interval": wald_interval}}
    for name, kwargs in methods.items():
        for seed in (0, 1, 2):
            r = coverage_simulation(draws, seed, **kwargs)
            print(f"{name}, seed {seed}: {draws} frozen samples, coverage initial {r['initial']:.3f} trained "
                  f"{r['trained']:.3f} gain {r['gain']:.3f} all together {r['all']:.3f}; every cell "
                  f"{r['cells']:.3f} ± {r['cells_mcse']:.3f} (MC s.e.); {r['seconds']:.2f} s")
    # through crossed-calibrate's own analysis (settings, seed means, the full M): each quantity and all at once
    for name, kwargs in methods.items():
        r = analysis_coverage(max(50, draws // 5), 1, **kwargs)
        per = ", ".join(f"{q} {r[q]:.3f}" for q in ANALYSIS_QUANTITIES)
        print(f"{name}, through analyze ({r['draws']} samples): all together {r['all']:.3f} ± {r['all_mcse']:.3f}; "
              f"{per}; {r['seconds']:.1f} s")
