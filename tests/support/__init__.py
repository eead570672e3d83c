"""Helpers shared by the tests, one module per concern; test modules import these, never each other.

- ``paths``: the repository root and the shared data folder.
- ``scenes``: the tiny CPU config, the tiny demo scene, their command-line forms.
- ``scene_formats``: small synthetic scenes written in each on-disk format.
- ``fox``: the fox scene's photos shrunk for ``ngptune prepare``, its cameras to compare with.
- ``ranks``: W gloo ranks in spawned processes; ``rank_runs``: training runs on them used by several tests.
- ``launch_worker``: a tiny distributed worker run by the launcher tests.
- ``triton_worker``: a Triton test module's observations in Triton's CPU interpreter.
- ``packed_samples``: random packed sample layouts for the compaction tests.
- ``fake_nvml``: an in-memory ``pynvml``.
- ``studies``: study files for the sweep tests.
- ``processes``: finding and waiting for processes.
- ``cli``: running the commands in-process or as processes.
- ``served``: a command that serves a web page; ``browser``: a page in headless Chromium.
"""
