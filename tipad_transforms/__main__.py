"""``python -m tipad_transforms``: the ``tipad`` command line."""

from .cli import main

raise SystemExit(main())
