"""The console's screens, one module each: the dashboard (`main`), a job's log (`job_log`), a
yes/no question (`confirm`) and the keys (`help`)."""

TICK_S = 1.0  # a screen redraws this often with no news: ages count up and closed rows fade
