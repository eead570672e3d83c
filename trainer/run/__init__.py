"""One training run of ``python -m trainer``, the same for one process and for each rank of a job::

    settings.py   the config from the flags, the scene, the opening line
    checks.py     the scene and the --out folder before anything is written; resume sources
    status.py     status.json through the run's life (RunStatus); SIGTERM as Terminated
    progress.py   the progress bar or plain progress lines, the ETA
    finish.py     the trained model kept, the final evaluation announced and run
    lifecycle.py  run_training: the stages, with the differences of one process and a rank (Job)
"""
