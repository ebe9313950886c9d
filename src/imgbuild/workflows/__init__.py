"""The patch author's workflows: rebase, edit/refresh, check --onto, write-back, import."""
