"""sandbox_hiding: start each shipped sandbox server with the policy's denied paths hidden from its children.

Owns which globs a sandbox server hides (`--hide`, mcp_servers/sandbox/masks.py masks what they
name under its root in every child's mount namespace). A sandbox call is decided once, on the
arguments the gateway sees, but the code it runs may then open any path; hiding makes a denied path
absent in the child's view, whatever the code does (`..`, absolute paths, symlinks it makes,
/proc/self/root), for run_python, run_command and run_tests alike.

The globs are the `paths` of every deny rule whose server glob matches the sandbox's config name:
the user's rules and every risk profile's presets, each resolved against the server's root as the
policy resolves it. All profiles, not only the run's: the servers are started from the run's
settings, which do not carry the task's profile, and a session may outlive one step; hiding what
another profile denies only makes the sandbox stricter. A sandbox reached over HTTP is started by
someone else: give it its own `--hide` flags.
"""

from __future__ import annotations

import os
from fnmatch import fnmatchcase
from typing import Any, Mapping

from boundloop.tools import resources
from boundloop.tools.config import ServerConfig
from boundloop.tools.errors import PolicyError
from boundloop.tools.policy import PROFILE_RULES, Rule, load_policy

SANDBOX_MODULE = "boundloop.mcp_servers.sandbox"


def hiding_denied(configs: Mapping[str, ServerConfig], settings: Mapping[str, Any]) -> dict[str, ServerConfig]:
    """`configs` with `--hide GLOB` added to each stdio sandbox server of ours, per the module
    docstring. Touches the filesystem (resolves the globs' directories)."""
    rules = [*_user_rules(settings), *(rule for preset in PROFILE_RULES.values() for rule in preset)]
    return {name: _hiding(config, rules) for name, config in configs.items()}


def _hiding(config: ServerConfig, rules: list[Rule]) -> ServerConfig:
    root = config.path_root
    if config.command is None or SANDBOX_MODULE not in config.args or root is None:
        return config
    real_root = os.path.realpath(root)
    globs = dict.fromkeys(
        pattern.glob
        for rule in rules
        if rule.action == "deny" and fnmatchcase(config.name, rule.server)
        for glob in rule.paths
        if (pattern := resources.path_pattern(glob, real_root)) is not None
    )
    if not globs:
        return config
    return config.model_copy(update={"args": [*config.args, *(flag for glob in globs for flag in ("--hide", glob))]})


def _user_rules(settings: Mapping[str, Any]) -> tuple[Rule, ...]:
    """The user's rules; none when the policy does not load (intake refuses such a run before any tool runs)."""
    try:
        return load_policy(settings.get("policy") or {}).rules
    except PolicyError:
        return ()
