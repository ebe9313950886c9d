"""The patch author's workflows: check, rebase, bump, edit/refresh, check --onto, write-back."""
