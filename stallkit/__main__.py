"""`python -m stallkit`: the `kit` command line, for a source tree without the console script."""

from stallkit.kits.cli import main

# guarded: a spawned worker process imports this module again (as `__mp_main__`)
if __name__ == "__main__":
    main()
