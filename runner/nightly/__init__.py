"""`runner nightly`: the one command a scheduler (cron, Slurm's scrontab, a CI schedule) runs
every night, so a lab can stand in for IREE's own SDXL CI with nobody at the keyboard.

- pick.py: which build tonight measures (the newest on an index or find-links page, or a
  given one), and whether this machine has measured it already;
- plan.py: the night's steps (goldens check, bench goldens, an accuracy run, bench), each a
  runner command in the build's own environment;
- night.py: the night itself: steps into a dated dir, each recorded in the history, the
  history judged, a regression confirmed and bisected;
- notify.py: the JSON summary posted to a Slack/Teams-style webhook.
"""

__all__ = ["cli", "night", "notify", "pick", "plan"]
