"""boundloop.nodes: one module per phase of the loop, each a LangGraph node (intake, plan,
validate_plan, retrieve, act with its gate and observe steps, approve, execute, verify, critique,
repair, compact, remember, escalate, commit, finalize), and `calls`, the wrapper every tool call
passes right before dispatch.

Nodes return state updates; which node runs next is the guards' decision (graph/guards.py).
"""
