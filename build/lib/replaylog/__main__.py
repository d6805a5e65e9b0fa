"""`python -m replaylog`: the same command line as the `replaylog` script."""

from replaylog.cli import main

main()
