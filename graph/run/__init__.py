"""boundloop.graph.run: driving runs — the Runner that starts, resumes and inspects runs against
Postgres (`runner`), the worker pool on Procrastinate (`workers`), and what a cancelled run leaves
behind (`halt`).

Above the nodes: it drives the compiled graph, never a phase directly."""
