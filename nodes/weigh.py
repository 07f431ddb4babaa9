"""weigh: settle the critic's reply, made beside the judge in the step before, against the verifier's
verdict from that same step — the scores, the disagreement, the iteration's quality score — as the
critique step does when the critic follows verify. A run the critic's asking ended (no model answered,
or its share of the budget ran out) ends here, unless verify's step ended it first."""

from __future__ import annotations

from boundloop.graph.services import Services
from boundloop.graph.state import LoopState, LoopUpdate
from boundloop.nodes.critique import CriticReply, settled, unheard


async def weigh(state: LoopState, services: Services) -> LoopUpdate:
    pending = state["quality"]["critique"]["pending"]
    update: LoopUpdate = {"status": {"phase": "weigh"}}
    if stopped := pending.get("ending"):
        update["quality"] = {"critique": unheard(pending["problem"])}
        if not state.get("ending"):
            update["ending"] = stopped
        return update
    reply = pending["reply"]
    scored = settled(state, None if reply is None else CriticReply.model_validate(reply), pending["problem"])
    if state.get("ending"):
        scored.pop("ending", None)  # verify's ending stands
    return {**update, **scored}
