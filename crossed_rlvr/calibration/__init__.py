"""Human calibration of committed answers (paper 001 App. A): frozen stratified sample, blinded
two-stage annotation in a local web page, finite-population bounds; ``crossed-calibrate``."""
