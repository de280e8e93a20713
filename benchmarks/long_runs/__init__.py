"""Long runs: ``long_run.sh`` runs a job in the background from a worktree pinned to one commit, committing its
records under results/ as they complete; ``stamp_runs.py`` stamps the records that predate checksums."""
