"""The one-command crossed study: initial policy, matched arms, crossed evaluation, scores, analysis."""
