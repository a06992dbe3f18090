"""Entry point of ``msgpt-gui``.

STUB: the desktop application is not built yet (it is its own issue). Until it lands this command
says so and points to the command line, which already does everything the engine can.
"""

import sys


def main() -> int:
    print(
        "msgpt-gui: the desktop application is not available in this version yet (it is being built).\n"
        "Use the command line meanwhile:  msgpt predict SPECTRA.mgf -o candidates.csv --model BUNDLE",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
