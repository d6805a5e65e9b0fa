"""`python -m bench`: run the benchmark suite (see bench.cli)."""

from bench.cli import main

if __name__ == "__main__":
    main()
