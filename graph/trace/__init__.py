"""boundloop.graph.trace: the run's record — trace rows written per step (`record`), the LangSmith
mirror (`langsmith`), replay of a recorded trajectory against the compiled graph (`replay`), the
required trace fields (`fields`) and the one-sentence account of a run (`explain`).

Only records and reads what happened; never changes a run's course."""
