"""python -m tarkit <command>: the same as the tarkit command."""

from .cli.main import main

if __name__ == "__main__":
    main()
