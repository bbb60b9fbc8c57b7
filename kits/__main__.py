from kits.cli import main

main()
