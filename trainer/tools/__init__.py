"""The trainer's tools: small programs the driver runs as processes (``python -m trainer.tools.<tool>``,
command lines from :func:`trainer.contract.tool_argv`). Each prints what it found on stdout (one
JSON line where the driver reads it), bad input as one ``error: `` line with exit status 2.

::

    devices     the CUDA devices this machine shows to torch: {"cuda_devices": N}
    inspect     a scene as the trainer loads it: one JSON object (ngptune inspect formats it)
    demo_scene  write the built-in demo scene (a folder, a sequence, or the cached copy); prints paths
    bench_comm  all-reduce / all-gather timings of N local ranks (ngptune bench-comm's measurement)
"""
