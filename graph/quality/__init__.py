"""boundloop.graph.quality: judging work — which costly phases a run needs (planner, judge, critic), confidence, convergence of repairs, defect diagnosis,
the plan step a fault belongs to, the periodic goal check, targeted re-planning, and test reports
as verification data.

Pure functions of recorded state and verdicts; never calls tools."""
