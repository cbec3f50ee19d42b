"""The worker's public API: one request pipeline (`conversation`) under three dialects, Chat
Completions and Completions (`chat`), Messages and Responses, and the answers they write."""
