"""The parent's operator routes: the admin API (state, events, sessions, restarts), the job routes,
and the Prometheus metrics. The generation routes are the composition root's (`host/app.py`)."""
