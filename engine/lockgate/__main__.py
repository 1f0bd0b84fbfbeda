"""``python -m lockgate``: the same as the ``lockgate`` command."""

from lockgate.cli.main import main

raise SystemExit(main())
