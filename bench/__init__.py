"""replaylog's benchmark suite: `python -m bench` (or `make bench`).

Every figure that has a reference is a ratio measured in the same run, because the
machines this runs on are shared and noisy: absolute times drift, ratios much less.
"""
