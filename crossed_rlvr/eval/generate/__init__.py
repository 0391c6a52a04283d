"""Generation of the crossed design: plan and item seeds (``plan``), engines (``engines``), the serial
run (``runner``), Ray workers (``workers``), ``crossed-eval`` (``cli``)."""
