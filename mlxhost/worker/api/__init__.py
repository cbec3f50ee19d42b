"""The worker's public API: three dialects, Chat Completions and Completions (`chat`,
`completions`), Messages and Responses, on one request pipeline: the routes' shared state
(`serving`), the conversation each body becomes (`conversation`), the generation it asks for
(`generation`), and the answer run and written (`answer`, through each dialect's `writer`)."""
