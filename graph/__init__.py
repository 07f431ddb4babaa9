"""boundloop.graph: the state machine and everything a run needs around it.

At the top, the state machine itself:
- `state` (the checkpointed state and its reducers), `task` (the graph's input and run settings),
  `guards` (the conditional edges), `builder` (nodes + guards → StateGraph), `check` (the build-time
  check of the compiled graph), `server` (the graph `langgraph dev` serves);
- the contracts the guards and nodes share: `sends`, `schedule`, `safety`, `tripwires`, `ladder`,
  `fold_index`, `forms`, `services`.

Sub-packages by concern: `core` (vocabulary every layer may use), `models`, `context`, `trace`,
`quality`, `calls`, `run`, `cli`, `console`, `evals`. The public entry is the `boundloop` package:
`from boundloop import Runner, RunSettings, Task`.
"""
