"""Sharing the node's GPUs between jobs: slot claims every scheduler on the node sees."""
