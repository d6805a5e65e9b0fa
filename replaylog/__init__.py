"""replaylog: durable workflows for Python, re-derived by replaying a log of outcomes.

The public package: the command line (`replaylog …`, `python -m replaylog`) lives here,
above the engine and the console. `engine` and `console` are the implementation packages.
"""
