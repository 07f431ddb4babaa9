"""boundloop.graph.cli: the `boundloop` command. `app` is the Typer application; each command
group lives in a module of its own and registers itself on import.

Nothing else in the product imports this package: it is the top layer.
"""

from boundloop.graph.cli.app import app

__all__ = ["app"]
