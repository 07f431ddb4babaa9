"""rollback: undo a failed run's side effects (the saga), from what the ledger recorded.

Which endings roll back is a choice: quality failures and a reviewer's rejection do; budget,
timeout, cancel and waiting endings keep their partial work, because they can be extended,
resumed or decided. Compensations run last effect first and are idempotent, so finalize may
run them again after a crash without undoing twice.
"""

from __future__ import annotations

from typing import Any

from boundloop.checkpoints import store
from boundloop.graph.services import Services
from boundloop.graph.core.status import Terminal
from boundloop.tools import pinning, saga
from boundloop.tools.registry import qualified_name

ROLLS_BACK: frozenset[str] = frozenset(
    {Terminal.VALIDATION_FAIL, Terminal.REPEATED_FAILURE, Terminal.LOW_CONFIDENCE, Terminal.UNSAFE_DETECTION}
)


async def roll_back(run_id: str, settings: dict[str, Any], services: Services, pinned: dict[str, Any] | None = None) -> list[saga.CompensationOutcome]:
    """Compensate every completed side effect of the run; return one outcome per effect. A side
    effect sent but never answered (an INTENT without outcome) is listed for a person to check."""
    ledger = await store.run_ledger(await services.pool(), run_id)
    unanswered = [saga.unanswered(entry.call_id, qualified_name(entry.server, entry.tool)) for entry in reversed(ledger) if entry.status == "INTENT"]
    provider_run = [saga.provider_run(entry.call_id, qualified_name(entry.server, entry.tool), entry.result.get("arguments") or {})
                    for entry in reversed(ledger) if entry.status == "COMPLETE" and _hosted(entry)]
    unanswered += provider_run
    entries = [entry for entry in ledger if entry.status == "COMPLETE" and not _hosted(entry)]
    if not entries:
        return unanswered
    registry = await services.registry(run_id, settings, pinned)
    effects = [
        saga.Effect(call_id=entry.call_id, spec=spec, arguments=entry.result.get("arguments", {}),
                    structured=entry.result.get("structured"), key=entry.idempotency_key)
        for entry in entries
        if (spec := registry.get(qualified_name(entry.server, entry.tool))) is not None
    ]
    bridge = await services.bridge(run_id, settings)
    return unanswered + list(await saga.compensate(pinning.PinnedCalls(bridge, registry), effects, timeout_s=settings.get("tool_timeout_s", 30.0)))


def _hosted(entry: store.LedgerEntry) -> bool:
    """A side effect a provider-hosted tool made (graph/calls/hosted.py): nothing of ours can undo it."""
    return isinstance(entry.result, dict) and bool(entry.result.get("hosted"))
