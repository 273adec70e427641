"""Looking inside finished runs: the paper's error analysis (Appendix E), per-question
pictures (Figure 5) and run-against-run comparison. Clients of a run folder."""
