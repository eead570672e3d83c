"""HTML and CSV reports of profile runs and sweep studies (DESIGN.md §6)."""
