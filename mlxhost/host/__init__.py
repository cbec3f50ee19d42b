"""The parent process: the public HTTP front, admission, sessions, and one supervised worker per
model. It never imports MLX (`tests/unit/test_import_rules.py` holds it to that)."""
