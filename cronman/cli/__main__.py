"""``python -m cronman.cli``: the ``cronman`` command."""

from __future__ import annotations

from cronman.cli import main

main()
