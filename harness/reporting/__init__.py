"""Presentation only: the compare report and its tables and plots, the one-file HTML documents, the terminal's
summaries, `make report`'s cross-run summary and CSV, and reading result folders back."""
