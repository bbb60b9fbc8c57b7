"""`python -m kits`: the `kit` command line, for a source tree without the console script."""

from kits.cli import main

main()
