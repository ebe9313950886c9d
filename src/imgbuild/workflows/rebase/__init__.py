"""`patches rebase` (and the bump built on it): `control.py` starts, continues, skips, aborts and reports it;
`replay.py` carries and commits the series patch by patch; `finish.py` writes the result; `state.py` is its typed
state on disk; `carry_preview.py` previews the pending patches at a stop; `review.py` writes the review report."""
