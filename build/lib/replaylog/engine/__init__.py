"""The engine behind `replaylog`: the replay core, the store and the worker.

An implementation package: applications import from `replaylog` (the curated public
surface); what is not named there may change without notice.
"""
