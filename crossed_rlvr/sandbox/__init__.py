"""Execution of untrusted code (model-written programs) in an operating-system sandbox: :mod:`.bwrap` runs it,
:mod:`.harness` is the program inside. Nothing here executes model text in a process of ours."""
