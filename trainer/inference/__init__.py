"""What a trained run is used for: rendering views, camera paths and videos (``render``), and
exporting a mesh or a point cloud (``export``). ``python -m trainer.inference render|export ...``
or ``ngptune render|export ...``.

Modules: :mod:`.worldframe` (unit cube ↔ the capture's own world frame), :mod:`.loading` (a run
folder, snapshot or checkpoint folder → a model that renders), :mod:`.cameras` (splits, orbits,
camera-path files), :mod:`.render_views` (frames, spp, depth, ranks), :mod:`.outputs` (PNG, 16-bit
depth, video), :mod:`.mesh`, :mod:`.pointcloud`, :mod:`.progress`, :mod:`.cli`.
"""
