"""Speculative decoding inside the per-row batch: drafts, how many, and which the model keeps.

A row's next tokens are often already written somewhere in its own context: an edit re-emits the
file it changes, a tool call re-quotes paths. `PromptLookup` (lookup.py) drafts them from the
row's prompt and output; the row batch (rows/speculation.py) runs each row's last token and its
drafts through the model in one pass, and `verdicts` (acceptance.py) decides, per row, how many
drafts the model itself would have written: greedy rows keep the drafts equal to the argmax,
sampled rows keep them by the speculative-sampling rule, which leaves the output's distribution
the model's own. `DraftLength` (draft_length.py) sets each row's number of drafts from what it
kept, and stops drafting for a row whose drafts keep failing.
"""
