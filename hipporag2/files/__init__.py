"""The files a run and its caches leave on disk: written whole or not at all (`atomicio`),
named by content (`stagekeys`), laid out as a run folder (`run_files`, `result_lines`), and
kept free of secrets (`redact`)."""
