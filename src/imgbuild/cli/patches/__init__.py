"""`imgbuild patches`: `app.py` is its typer app (list, status, check, apply), `work.py` the commands that change
the series (rebase, edit, refresh, bump), `importing.py` `patches import`."""
