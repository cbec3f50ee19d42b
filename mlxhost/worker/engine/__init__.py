"""The model and the thread that runs it: continuous batching, per-request sampling and grammars,
a model split across ranks, and the tokens turned back into text."""
