"""boundloop.graph.context: what a model request carries and how it stays bounded — the request's
measured size (`size`), compaction of old turns into a structural record (`compaction`,
`call_lines`), the built-in payload read-back tool (`payloads`), and persistent memory behind its
write gate (`memory`).

Never calls a model or a tool itself."""
