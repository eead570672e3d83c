"""``ngptune prepare``: a posed instant-ngp scene from a folder of photos or a video (frames chosen
by sharpness and spacing, structure from motion through pycolmap, ``transforms.json``)."""

from ngptune.prepare.alignment import PoseErrors, Similarity, pose_errors, umeyama
from ngptune.prepare.command import PrepareResult, prepare_scene

__all__ = ["PoseErrors", "PrepareResult", "Similarity", "pose_errors", "prepare_scene", "umeyama"]
